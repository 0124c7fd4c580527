//! Spot prices over time, as AWS publishes them: the output of
//! `aws ec2 describe-spot-price-history` (JSON, `{"SpotPriceHistory":
//! [{"AvailabilityZone", "InstanceType", "ProductDescription",
//! "SpotPrice", "Timestamp"}, …]}`), or the tab-separated archive of it
//! (`az_id, instance_type, product_description, spot_price_usd,
//! timestamp`, one change per line, as `ericpauley/aws-spot-price-history`
//! keeps it), plain, gzipped or zstd-compressed.
//!
//! Each row is a price change: the price holds from its timestamp until
//! the next change of the same type in the same zone. One zone and one
//! product are read (a VM runs in one zone); the result is each instance
//! type's changes in time order. A row that cannot be read is skipped with
//! its line and reason; the others go on.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;

use crate::source::{Diagnostics, Location, TraceError, open_input};

/// A spot price from `time_us` (µs since the epoch) on, USD an hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PriceChange {
    pub time_us: u64,
    pub usd_h: f64,
}

/// Each instance type's price changes in one zone, in time order (one per
/// instant: the last row read for it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpotPriceHistory {
    pub by_type: BTreeMap<String, Vec<PriceChange>>,
}

#[derive(Deserialize)]
struct AwsCli {
    #[serde(rename = "SpotPriceHistory")]
    history: Vec<AwsCliRow>,
}

#[derive(Deserialize)]
struct AwsCliRow {
    #[serde(rename = "AvailabilityZone")]
    zone: String,
    #[serde(rename = "AvailabilityZoneId", default)]
    zone_id: Option<String>,
    #[serde(rename = "InstanceType")]
    vm_type: String,
    #[serde(rename = "ProductDescription")]
    product: String,
    #[serde(rename = "SpotPrice")]
    price: String,
    #[serde(rename = "Timestamp")]
    timestamp: String,
}

/// Read the changes of `product` (such as `Linux/UNIX`) in `zone` (a name
/// such as `us-east-1a`, or a zone ID such as `use1-az2`) from `path`.
/// An error if the file cannot be read or holds no change there.
pub fn read(
    path: &Path,
    zone: &str,
    product: &str,
) -> Result<(SpotPriceHistory, Diagnostics), TraceError> {
    let diagnostics = Diagnostics::new();
    let mut text = String::new();
    open_input(path, &diagnostics)?
        .read_to_string(&mut text)
        .map_err(|e| TraceError::io(path, e))?;
    let mut changes: BTreeMap<String, BTreeMap<u64, f64>> = BTreeMap::new();
    let mut keep = |row: Row<'_>, line: u64| {
        diagnostics.rows(1);
        if row.product != product || !row.zones.contains(&zone) {
            return;
        }
        let at = || Location {
            file: path.to_owned(),
            line,
            record: None,
        };
        let usd_h = match row.price.trim().parse::<f64>() {
            Ok(p) if p.is_finite() && p >= 0.0 => p,
            _ => {
                return diagnostics.skip(
                    at(),
                    "invalid_field",
                    format!("price `{}` is not a price", row.price),
                );
            }
        };
        let time_us = match chrono::DateTime::parse_from_rfc3339(row.timestamp.trim())
            .ok()
            .and_then(|t| u64::try_from(t.timestamp_micros()).ok())
        {
            Some(t) => t,
            None => {
                return diagnostics.skip(
                    at(),
                    "invalid_field",
                    format!("timestamp `{}` is not RFC 3339", row.timestamp),
                );
            }
        };
        changes
            .entry(row.vm_type.to_owned())
            .or_default()
            .insert(time_us, usd_h);
    };
    if text.trim_start().starts_with('{') {
        let cli: AwsCli = serde_json::from_str(&text).map_err(|e| {
            TraceError::invalid(
                path,
                format!("not `describe-spot-price-history` output: {e}"),
            )
        })?;
        for (i, r) in cli.history.iter().enumerate() {
            let zones = [r.zone.as_str(), r.zone_id.as_deref().unwrap_or("")];
            keep(
                Row {
                    zones: &zones,
                    vm_type: &r.vm_type,
                    product: &r.product,
                    price: &r.price,
                    timestamp: &r.timestamp,
                },
                i as u64 + 1,
            );
        }
    } else {
        for (i, line) in text.lines().enumerate() {
            let line_no = i as u64 + 1;
            if line.trim().is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let [zone_id, vm_type, product, price, timestamp] = fields[..] else {
                diagnostics.skip(
                    Location {
                        file: path.to_owned(),
                        line: line_no,
                        record: None,
                    },
                    "invalid_record",
                    format!(
                        "{} tab-separated fields, expected 5 (zone, type, product, price, time)",
                        fields.len()
                    ),
                );
                continue;
            };
            keep(
                Row {
                    zones: &[zone_id],
                    vm_type,
                    product,
                    price,
                    timestamp,
                },
                line_no,
            );
        }
    }
    if changes.is_empty() {
        return Err(TraceError::invalid(
            path,
            format!("no `{product}` spot price in zone `{zone}`"),
        ));
    }
    let by_type = changes
        .into_iter()
        .map(|(t, c)| {
            let c = c
                .into_iter()
                .map(|(time_us, usd_h)| PriceChange { time_us, usd_h })
                .collect();
            (t, c)
        })
        .collect();
    Ok((SpotPriceHistory { by_type }, diagnostics))
}

struct Row<'a> {
    zones: &'a [&'a str],
    vm_type: &'a str,
    product: &'a str,
    price: &'a str,
    timestamp: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_gives_each_type_its_changes_in_one_zone_and_names_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prices.tsv");
        std::fs::write(
            &path,
            "use1-az2\tc4.large\tLinux/UNIX\t0.0400\t2022-05-31T21:00:00+00:00\n\
             use1-az2\tc4.large\tLinux/UNIX\t0.0300\t2022-05-31T19:00:00+00:00\n\
             use1-az2\tc4.large\tSUSE Linux\t0.1300\t2022-05-31T19:00:00+00:00\n\
             use1-az3\tc4.large\tLinux/UNIX\t0.0500\t2022-05-31T19:00:00+00:00\n\
             use1-az2\tm4.large\tLinux/UNIX\tcheap\t2022-05-31T19:00:00+00:00\n\
             use1-az2\tm4.large\tLinux/UNIX\t0.04\n\
             use1-az2\tc4.xlarge\tLinux/UNIX\t0.0617\t2022-05-31T20:00:00+00:00\n",
        )
        .unwrap();
        let (history, diags) = read(&path, "use1-az2", "Linux/UNIX").unwrap();
        let at = |h: u64| 1_654_020_000_000_000 + (h - 18) * 3_600_000_000; // 2022-05-31T18:00Z
        assert_eq!(
            history.by_type["c4.large"],
            [
                PriceChange {
                    time_us: at(19),
                    usd_h: 0.03
                },
                PriceChange {
                    time_us: at(21),
                    usd_h: 0.04
                }
            ]
        );
        assert_eq!(history.by_type["c4.xlarge"].len(), 1);
        assert!(!history.by_type.contains_key("m4.large"));
        assert_eq!(diags.skipped_total(), 2, "{}", diags.summary());
        let summary = diags.summary();
        assert!(summary.contains("prices.tsv:5"), "{summary}");
        assert!(summary.contains("`cheap` is not a price"), "{summary}");
        assert!(summary.contains("4 tab-separated fields"), "{summary}");
        let err = read(&path, "use1-az9", "Linux/UNIX").unwrap_err();
        assert!(
            err.to_string()
                .contains("no `Linux/UNIX` spot price in zone `use1-az9`")
        );
    }

    #[test]
    fn the_aws_cli_output_is_read_by_zone_name_or_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.json");
        std::fs::write(
            &path,
            r#"{"SpotPriceHistory": [
                {"AvailabilityZone": "us-east-1a", "AvailabilityZoneId": "use1-az6", "InstanceType": "c4.large",
                 "ProductDescription": "Linux/UNIX", "SpotPrice": "0.030800", "Timestamp": "2018-09-10T12:00:00.000Z"},
                {"AvailabilityZone": "us-east-1b", "InstanceType": "c4.large",
                 "ProductDescription": "Linux/UNIX", "SpotPrice": "0.031000", "Timestamp": "2018-09-10T12:00:00.000Z"}
            ]}"#,
        )
        .unwrap();
        for zone in ["us-east-1a", "use1-az6"] {
            let (history, _) = read(&path, zone, "Linux/UNIX").unwrap();
            assert_eq!(history.by_type["c4.large"][0].usd_h, 0.0308);
        }
        std::fs::write(&path, r#"{"Spot": []}"#).unwrap();
        let err = read(&path, "us-east-1a", "Linux/UNIX").unwrap_err();
        assert!(
            err.to_string().contains("describe-spot-price-history"),
            "{err}"
        );
    }
}
