//! SQL over the Parquet trace tables with DataFusion: the engine behind
//! `jobcast sql`.
//!
//! Three things are added to DataFusion's own planning:
//! - a common table expression (or any identical aliased subquery) used
//!   more than once in a query is computed once, before the query, and
//!   read from memory at each use ([`materialise_shared_subqueries`]).
//!   DataFusion inlines a CTE at every reference, so a self-join of a CTE
//!   scans and aggregates its tables once per side; DuckDB and PostgreSQL
//!   materialise such CTEs.
//! - an aggregate over a `UNION ALL` whose branches are told apart by a
//!   literal it groups by runs per branch
//!   ([`labelled_union::AggregateLabelledUnion`]).
//! - a join on equal keys whose other conditions are all ranges (`b.end <
//!   a.submit AND b.end >= a.submit - 3 days`) finds each row's matches by
//!   binary search instead of filtering every pair with equal keys
//!   ([`band_join::BandJoinExec`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use datafusion::common::TableReference;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::error::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};

use crate::tables::TABLES;

pub mod band_join;
pub mod labelled_union;

/// A DataFusion session with jobcast's additions to the optimizer, and no
/// tables.
///
/// Plans are cut into twice as many partitions as there are cores
/// (DataFusion's default is one per core), so that a core whose share of
/// a join runs out first has less to wait for. Measured on 2 cores
/// (docs/performance.md, SQL): `docs/queries.sql`'s Q4 took 15 % less,
/// the other queries the same or less. `SET
/// datafusion.execution.target_partitions` overrides it.
pub fn new_session() -> SessionContext {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // `SHOW TABLES` and `information_schema` as in other SQL shells.
    let config = SessionConfig::new()
        .with_target_partitions(2 * cores)
        .with_information_schema(true);
    let state = SessionContext::new_with_config(config).state();
    // The band join replaces hash joins before DataFusion's late filter
    // pushdown, which would hand the replaced join's dynamic filter to its
    // probe side.
    let mut rules = state.physical_optimizers().to_vec();
    let at = rules
        .iter()
        .position(|rule| rule.name() == "FilterPushdown(Post)")
        .unwrap_or(rules.len());
    rules.insert(at, Arc::new(band_join::BandJoin));
    let state = SessionStateBuilder::new_from_existing(state)
        .with_physical_optimizer_rules(rules)
        .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.add_optimizer_rule(Arc::new(labelled_union::AggregateLabelledUnion));
    ctx
}

/// How query results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// An aligned text table.
    Table,
    /// CSV with a header row.
    Csv,
    /// A JSON array of row objects.
    Json,
}

impl std::str::FromStr for OutputFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "table" => Ok(OutputFormat::Table),
            "csv" => Ok(OutputFormat::Csv),
            "json" => Ok(OutputFormat::Json),
            other => Err(format!(
                "unknown output format `{other}` (expected table, csv or json)"
            )),
        }
    }
}

/// A DataFusion session with every trace table found in `dir` registered
/// under its name (`events`, `jobs`, `tasks`, `machines`). A table may be a
/// single `NAME.parquet` file or a `NAME/` directory of Parquet files.
pub async fn open_session(dir: &Path) -> Result<SessionContext, DataFusionError> {
    if !dir.is_dir() {
        return Err(DataFusionError::Plan(format!(
            "{} is not a directory of Parquet tables (make one with `jobcast convert`)",
            dir.display()
        )));
    }
    let ctx = new_session();
    let mut found = 0;
    for name in TABLES {
        let file = dir.join(format!("{name}.parquet"));
        let folder = dir.join(name);
        let path = if file.is_file() {
            file
        } else if folder.is_dir() {
            folder
        } else {
            continue;
        };
        let path = path.to_str().ok_or_else(|| {
            DataFusionError::Plan(format!("{} is not valid UTF-8", path.display()))
        })?;
        ctx.register_parquet(name, path, ParquetReadOptions::default())
            .await?;
        found += 1;
    }
    if found == 0 {
        return Err(DataFusionError::Plan(format!(
            "no trace tables ({}) in {}",
            TABLES.join(", "),
            dir.display()
        )));
    }
    Ok(ctx)
}

/// How queries are planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryOptions {
    /// Leave CTEs inlined at every use, as DataFusion plans them, instead of
    /// computing each one used more than once a single time.
    pub inline_ctes: bool,
}

/// Run one SQL statement and collect its result.
pub async fn run_query(
    ctx: &SessionContext,
    sql: &str,
    options: QueryOptions,
) -> Result<Vec<RecordBatch>, DataFusionError> {
    let plan = ctx.state().create_logical_plan(sql).await?;
    execute(ctx, plan, options).await
}

/// One statement of a script: where it starts and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptStatement {
    /// The line it starts on, from 1.
    pub line: usize,
    /// Its text, without comments and the `;` that ends it.
    pub text: String,
}

/// The statements of `script`, in order, as the DuckDB and SQLite shells
/// read them: a SQL statement ends at a `;` outside quotes and comments
/// (or at the end of the script); a line that starts with `.` where a
/// statement would start is a shell command (`.tables`), ended by its
/// line. Comments (`--`, `/* */`) are left out.
pub fn split_script(script: &str) -> Vec<ScriptStatement> {
    let mut statements = Vec::new();
    let mut text = String::new();
    let mut line = 1;
    let mut start = None;
    let mut chars = script.chars().peekable();
    let mut end = |text: &mut String, start: &mut Option<usize>| {
        let taken = std::mem::take(text);
        if let Some(line) = start.take() {
            statements.push(ScriptStatement {
                line,
                text: taken.trim().to_owned(),
            });
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\n' => {
                line += 1;
                text.push(c);
            }
            '.' if start.is_none() => {
                start = Some(line);
                text.push(c);
                while let Some(&next) = chars.peek() {
                    if next == '\n' {
                        break;
                    }
                    text.push(next);
                    chars.next();
                }
                end(&mut text, &mut start);
            }
            '-' if chars.peek() == Some(&'-') => {
                while chars.peek().is_some_and(|&next| next != '\n') {
                    chars.next();
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for next in chars.by_ref() {
                    if next == '\n' {
                        line += 1;
                        text.push(next);
                    }
                    if last == '*' && next == '/' {
                        break;
                    }
                    last = next;
                }
            }
            ';' => end(&mut text, &mut start),
            c if c.is_whitespace() => text.push(c),
            '\'' | '"' => {
                start.get_or_insert(line);
                text.push(c);
                for next in chars.by_ref() {
                    if next == '\n' {
                        line += 1;
                    }
                    text.push(next);
                    if next == c {
                        break;
                    }
                }
            }
            c => {
                start.get_or_insert(line);
                text.push(c);
            }
        }
    }
    end(&mut text, &mut start);
    statements
}

async fn execute(
    ctx: &SessionContext,
    plan: LogicalPlan,
    options: QueryOptions,
) -> Result<Vec<RecordBatch>, DataFusionError> {
    let plan = if options.inline_ctes {
        plan
    } else {
        materialise_shared_subqueries(ctx, plan).await?
    };
    ctx.execute_logical_plan(plan).await?.collect().await
}

/// Compute every aliased subquery that occurs more than once in a query
/// (a CTE referenced twice or more: DataFusion's SQL planner copies its
/// plan into each reference) a single time, and replace each occurrence
/// with a scan of the result held in memory. The outermost repeated
/// subquery goes first; what repeats inside it is computed with it.
///
/// Left as planned: statements other than queries (a `CREATE VIEW`'s
/// definition must stay a definition; `EXPLAIN` shows DataFusion's own
/// plan), recursive queries, and subqueries that refer to an outer query.
/// The cost is memory: a shared CTE's whole result is held while the query
/// runs (`--inline-ctes` turns this off).
pub async fn materialise_shared_subqueries(
    ctx: &SessionContext,
    mut plan: LogicalPlan,
) -> Result<LogicalPlan, DataFusionError> {
    if !is_query(&plan) || contains(&plan, |p| matches!(p, LogicalPlan::RecursiveQuery(_)))? {
        return Ok(plan);
    }
    let mut computed = 0;
    while let Some(shared) = first_repeated_subquery(&plan)? {
        computed += 1;
        let LogicalPlan::SubqueryAlias(alias) = &shared else {
            unreachable!("only aliased subqueries are candidates")
        };
        let schema = Arc::new(shared.schema().as_arrow().clone());
        let partitions = ctx
            .execute_logical_plan(shared.clone())
            .await?
            .collect_partitioned()
            .await?
            .into_iter()
            .map(|batches| {
                batches
                    .into_iter()
                    .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let table = MemTable::try_new(schema, partitions)?;
        // Plans compare table scans by name, not by source: a name of its
        // own keeps two computed subqueries apart, the alias restores the
        // qualifier the query refers to.
        let scan = LogicalPlanBuilder::scan(
            TableReference::bare(format!("{} (computed {computed})", alias.alias)),
            provider_as_source(Arc::new(table)),
            None,
        )?
        .alias(alias.alias.clone())?
        .build()?;
        plan = plan
            .transform_down_with_subqueries(|node| {
                Ok(if node == shared {
                    Transformed::new(scan.clone(), true, TreeNodeRecursion::Jump)
                } else {
                    Transformed::no(node)
                })
            })?
            .data;
    }
    Ok(plan)
}

/// A plan that returns rows and changes nothing.
fn is_query(plan: &LogicalPlan) -> bool {
    !matches!(
        plan,
        LogicalPlan::Ddl(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Explain(_)
            | LogicalPlan::Analyze(_)
            | LogicalPlan::DescribeTable(_)
    )
}

fn contains(
    plan: &LogicalPlan,
    predicate: impl Fn(&LogicalPlan) -> bool,
) -> Result<bool, DataFusionError> {
    let mut found = false;
    plan.apply_with_subqueries(|node| {
        found = predicate(node);
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    Ok(found)
}

/// The first (outermost, in pre-order) aliased subquery that occurs more
/// than once, computes something (more than scan a table) and can be
/// computed on its own.
fn first_repeated_subquery(plan: &LogicalPlan) -> Result<Option<LogicalPlan>, DataFusionError> {
    let mut seen: HashMap<&LogicalPlan, usize> = HashMap::new();
    let mut order: Vec<&LogicalPlan> = Vec::new();
    // `apply_with_subqueries` hands out borrows that do not outlive the
    // closure, so the nodes are counted by value.
    let mut nodes: Vec<LogicalPlan> = Vec::new();
    plan.apply_with_subqueries(|node| {
        if matches!(node, LogicalPlan::SubqueryAlias(_)) {
            nodes.push(node.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    for node in &nodes {
        let count = seen.entry(node).or_default();
        if *count == 0 {
            order.push(node);
        }
        *count += 1;
    }
    // An alias of a bare table (a computed one included) is only a scan.
    let computes = |node: &LogicalPlan| match node {
        LogicalPlan::SubqueryAlias(alias) => !matches!(*alias.input, LogicalPlan::TableScan(_)),
        _ => false,
    };
    Ok(order
        .into_iter()
        .find(|node| seen[node] > 1 && computes(node) && !node.contains_outer_reference())
        .cloned())
}

/// Render record batches in the given format.
pub fn render(batches: &[RecordBatch], format: OutputFormat) -> Result<String, DataFusionError> {
    match format {
        OutputFormat::Table => Ok(format!(
            "{}\n",
            arrow::util::pretty::pretty_format_batches(batches)?
        )),
        OutputFormat::Csv => {
            let mut out = Vec::new();
            {
                let mut writer = arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(&mut out);
                for batch in batches {
                    writer.write(batch)?;
                }
            }
            Ok(String::from_utf8_lossy(&out).into_owned())
        }
        OutputFormat::Json => {
            let mut out = Vec::new();
            {
                // Nulls written as `null`, not left out: every row has
                // every column.
                let mut writer = arrow::json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, arrow::json::writer::JsonArray>(&mut out);
                for batch in batches {
                    writer.write(batch)?;
                }
                writer.finish()?;
            }
            if out.is_empty() {
                out.extend_from_slice(b"[]");
            }
            out.push(b'\n');
            Ok(String::from_utf8_lossy(&out).into_owned())
        }
    }
}

/// Registers `t(k, v)` in `ctx`, in memory: a nullable string key and an
/// integer per row.
#[cfg(test)]
pub(crate) fn register_t(ctx: &SessionContext, keys: &[Option<&str>], values: &[i64]) {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(keys.to_vec())),
            Arc::new(Int64Array::from(values.to_vec())),
        ],
    )
    .unwrap();
    let table = MemTable::try_new(schema, vec![vec![batch]]).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_splits_at_semicolons_outside_quotes_and_comments() {
        let script = "-- counts\nSELECT 1;\n\n  SELECT ';' AS \"a;b\" -- a ; in a comment\n  FROM t;\n.tables\n/* a\n ; */ SELECT 3";
        let statements = split_script(script);
        let split: Vec<(usize, &str)> = statements
            .iter()
            .map(|s| (s.line, s.text.as_str()))
            .collect();
        assert_eq!(
            split,
            [
                (2, "SELECT 1"),
                (4, "SELECT ';' AS \"a;b\" \n  FROM t"),
                (6, ".tables"),
                (8, "SELECT 3"),
            ]
        );
        assert!(split_script("-- nothing\n;\n").is_empty());
    }

    /// A session with `t(k, v)`: 6 rows over 3 keys, in memory.
    fn session() -> SessionContext {
        let ctx = new_session();
        let keys = ["a", "a", "b", "b", "b", "c"].map(Some);
        register_t(&ctx, &keys, &[1, 2, 3, 4, 5, 6]);
        ctx
    }

    #[tokio::test]
    async fn sessions_have_two_partitions_per_core_unless_set() {
        let ctx = new_session();
        let cores = std::thread::available_parallelism().unwrap().get();
        assert_eq!(ctx.state().config().target_partitions(), 2 * cores);
        run_query(
            &ctx,
            "SET datafusion.execution.target_partitions = 3",
            QueryOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!(ctx.state().config().target_partitions(), 3);
    }

    /// Scans of the registered table `t` left in the plan.
    fn scans_of_t(plan: &LogicalPlan) -> usize {
        let mut n = 0;
        plan.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = node
                && scan.table_name.table() == "t"
            {
                n += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        n
    }

    async fn rows(ctx: &SessionContext, sql: &str, inline_ctes: bool) -> String {
        let batches = run_query(ctx, sql, QueryOptions { inline_ctes })
            .await
            .unwrap();
        render(&batches, OutputFormat::Csv).unwrap()
    }

    const SELF_JOIN: &str = "WITH sums AS (SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k)
        SELECT a.k, b.k AS other, a.s + b.s AS total FROM sums a JOIN sums b ON a.n <= b.n
        ORDER BY a.k, other";

    #[tokio::test]
    async fn a_cte_used_twice_is_computed_once_with_the_same_answer() {
        let ctx = session();
        let plan = ctx.state().create_logical_plan(SELF_JOIN).await.unwrap();
        assert_eq!(
            scans_of_t(&plan),
            2,
            "DataFusion inlines the CTE at each use"
        );
        let shared = materialise_shared_subqueries(&ctx, plan).await.unwrap();
        assert_eq!(scans_of_t(&shared), 0, "{shared}");

        let materialised = rows(&ctx, SELF_JOIN, false).await;
        assert_eq!(materialised, rows(&ctx, SELF_JOIN, true).await);
        assert!(
            materialised.starts_with("k,other,total\na,a,6\na,b,15\n"),
            "{materialised}"
        );
    }

    #[tokio::test]
    async fn a_cte_used_once_stays_inlined() {
        let ctx = session();
        let sql =
            "WITH big AS (SELECT k, v FROM t WHERE v > 1) SELECT count(*) FROM big WHERE k = 'b'";
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        let same = materialise_shared_subqueries(&ctx, plan.clone())
            .await
            .unwrap();
        assert_eq!(same, plan);
        assert_eq!(rows(&ctx, sql, false).await, "count(*)\n3\n");
    }

    #[tokio::test]
    async fn shared_ctes_in_subqueries_and_nested_ctes() {
        let ctx = session();
        // `c` is used in the outer query and in a correlated scalar
        // subquery; `d` (used twice) is built on `c`.
        let sql = "WITH c AS (SELECT k, v FROM t WHERE v % 2 = 1),
                        d AS (SELECT k, max(v) AS m FROM c GROUP BY k)
            SELECT o.k, o.v, (SELECT sum(i.v) FROM c i WHERE i.k = o.k) AS key_sum,
                   (SELECT max(m) FROM d) AS top, (SELECT count(*) FROM d) AS keys
            FROM c o ORDER BY o.v";
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        assert!(scans_of_t(&plan) >= 3);
        let shared = materialise_shared_subqueries(&ctx, plan).await.unwrap();
        assert_eq!(scans_of_t(&shared), 0, "{shared}");
        let materialised = rows(&ctx, sql, false).await;
        assert_eq!(materialised, rows(&ctx, sql, true).await);
        assert_eq!(
            materialised,
            "k,v,key_sum,top,keys\na,1,1,5,2\nb,3,8,5,2\nb,5,8,5,2\n"
        );
    }

    #[tokio::test]
    async fn views_and_recursive_queries_are_left_as_planned() {
        let ctx = session();
        // A view's definition must see rows inserted after it was made.
        run_query(
            &ctx,
            &format!("CREATE VIEW pairs AS {SELF_JOIN}"),
            QueryOptions::default(),
        )
        .await
        .unwrap();
        let before = rows(&ctx, "SELECT count(*) AS n FROM pairs", false).await;
        run_query(
            &ctx,
            "INSERT INTO t VALUES ('d', 9), ('d', 10)",
            QueryOptions::default(),
        )
        .await
        .unwrap();
        let after = rows(&ctx, "SELECT count(*) AS n FROM pairs", false).await;
        assert_eq!((before.as_str(), after.as_str()), ("n\n6\n", "n\n11\n"));

        let sql = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 4)
            SELECT sum(a.i) AS s FROM r a JOIN r b ON a.i = b.i";
        assert_eq!(rows(&ctx, sql, false).await, "s\n10\n");
    }
}
