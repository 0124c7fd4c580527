//! A setting that cannot be used, named by its key, so that the service's
//! TOML file, its flags and the simulator's options all report the same
//! name for the same setting.

/// A bad setting: its dotted key (as in `deploy/jobcast.toml`, relative to
/// the section that checked it) and what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }

    /// The same error, its key inside `section` (`history` with `window_us`
    /// becomes `history.window_us`).
    pub fn within(self, section: &str) -> Self {
        ConfigError {
            key: format!("{section}.{}", self.key),
            message: self.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_names_its_full_key() {
        let e = ConfigError::new("window_us", "must be positive")
            .within("history")
            .within("engine");
        assert_eq!(e.key, "engine.history.window_us");
        assert_eq!(e.to_string(), "engine.history.window_us: must be positive");
    }
}
