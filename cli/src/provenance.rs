//! `jobcast serve --print-config`: the effective configuration, each value
//! with the layer that set it. The layers are applied one at a time (the
//! defaults, the file, the environment, the named flags, `--set`) and a
//! value belongs to the last layer that changed it.

use std::collections::BTreeMap;

use serde_json::Value;

/// A configuration as flat `section.key` leaves (absent values, unset
/// options, left out), from its serde form.
pub fn leaves(config: &impl serde::Serialize) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let value = serde_json::to_value(config).expect("the configuration serialises");
    flatten(&mut out, &mut Vec::new(), &value);
    out
}

fn flatten(out: &mut BTreeMap<String, Value>, path: &mut Vec<String>, value: &Value) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, value) in map {
                path.push(key_part(key));
                flatten(out, path, value);
                path.pop();
            }
        }
        Value::Null => {}
        other => {
            out.insert(path.join("."), other.clone());
        }
    }
}

/// A key as TOML writes it in a dotted key: bare if it can be, else
/// quoted (`kafka.client."security.protocol"`).
fn key_part(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

/// `final_` as TOML lines, `key = value  # layer`, the layer being the
/// last of `layers` (each a name and the configuration after it, in order,
/// the defaults first) whose value differs from the one before. Secrets
/// (the HTTP token, passwords) are shown as set, not by value.
pub fn annotated(layers: &[(String, BTreeMap<String, Value>)]) -> String {
    let (_, final_) = layers.last().expect("at least the defaults");
    let mut out = String::from(
        "# jobcast serve: the effective configuration, each value with the layer that set it\n",
    );
    for (key, value) in final_ {
        let mut origin = "default";
        for pair in layers.windows(2) {
            if pair[1].1.get(key) != pair[0].1.get(key) {
                origin = &pair[1].0;
            }
        }
        let secret = key == "http.token"
            || ["password", "secret"]
                .iter()
                .any(|word| key.to_ascii_lowercase().contains(word));
        let shown = if secret {
            "\"<set, not shown>\"".to_owned()
        } else {
            toml_value(value)
        };
        out.push_str(&format!("{key} = {shown}  # {origin}\n"));
    }
    out
}

fn toml_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(toml_value).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) if map.is_empty() => "{}".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_value_shows_the_last_layer_that_changed_it() {
        let layer = |v: Value| {
            let mut out = BTreeMap::new();
            flatten(&mut out, &mut Vec::new(), &v);
            out
        };
        let layers = vec![
            (
                "default".to_owned(),
                layer(json!({"a": {"x": 1, "y": "s"}, "http": {"token": null}})),
            ),
            (
                "the file f.toml".to_owned(),
                layer(json!({"a": {"x": 2, "y": "s"}, "http": {"token": "t0p"}})),
            ),
            (
                "flag --set".to_owned(),
                layer(json!({"a": {"x": 2, "y": "s", "z.w": [1, 2]}, "http": {"token": "t0p"}})),
            ),
        ];
        let shown = annotated(&layers);
        assert!(shown.contains("a.x = 2  # the file f.toml\n"), "{shown}");
        assert!(shown.contains("a.y = \"s\"  # default\n"), "{shown}");
        assert!(
            shown.contains("a.\"z.w\" = [1, 2]  # flag --set\n"),
            "{shown}"
        );
        assert!(
            shown.contains("http.token = \"<set, not shown>\"  # the file f.toml\n"),
            "{shown}"
        );
        assert!(!shown.contains("t0p"));
    }
}
