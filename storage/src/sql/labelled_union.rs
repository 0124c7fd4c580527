//! An optimizer rule for a common analytical shape: rows of several
//! subqueries, each tagged with a literal saying where it came from,
//! combined with `UNION ALL` and aggregated per tag and key:
//!
//! ```sql
//! WITH history AS (
//!   SELECT a.job_id, 'user' AS feature, b.mean_rt FROM … JOIN … ON a.user = b.user
//!   UNION ALL
//!   SELECT a.job_id, 'job_name', b.mean_rt FROM … JOIN … ON a.job_name = b.job_name
//! )
//! SELECT job_id, feature, stddev_pop(mean_rt) FROM history GROUP BY job_id, feature
//! ```
//!
//! DataFusion aggregates the union's rows as they come, hashing and
//! comparing the tag of every row. [`AggregateLabelledUnion`] aggregates
//! each branch on its own, grouped by the other keys, and puts the tag
//! back on the (far fewer) result rows.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema};
use datafusion::error::Result;
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan, Projection, Union};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};

/// Rewrites
///
/// ```text
/// Aggregate: groupBy=[g1, …, label, …], aggr=[a1, …]
///   SubqueryAlias (any number, or none)
///     Union
///       Projection: …, 'x' AS label, …
///       Projection: …, 'y' AS label, …
/// ```
///
/// where the grouping column `label` is, in every branch, a non-null
/// literal that no other branch uses, into
///
/// ```text
/// Projection: (the aggregate's own output columns)
///   Union
///     Projection: g1, …, 'x' AS label, …, a1, …
///       Aggregate: groupBy=[g1, …], aggr=[a1, …]
///         Projection: …, 'x' AS label, …
///     …
/// ```
///
/// Every group's rows come from one branch, the one whose label it has, so
/// each aggregate function sees exactly the rows it saw before. Grouped by
/// the label alone the rewrite would be wrong (an aggregate without
/// grouping keys yields a row even over an empty branch), so it needs at
/// least one other key.
#[derive(Debug, Default)]
pub struct AggregateLabelledUnion;

impl OptimizerRule for AggregateLabelledUnion {
    fn name(&self) -> &str {
        "aggregate_labelled_union"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(aggregate) = &plan else {
            return Ok(Transformed::no(plan));
        };
        // A plan this rule cannot build (it checks types and names as any
        // plan is built) is left as it was rather than failing the query.
        Ok(match per_branch(aggregate) {
            Ok(Some(rewritten)) => Transformed::yes(rewritten),
            Ok(None) | Err(_) => Transformed::no(plan),
        })
    }
}

/// The aggregate split over the branches of the union below it, if it has
/// the shape [`AggregateLabelledUnion`] rewrites.
fn per_branch(aggregate: &Aggregate) -> Result<Option<LogicalPlan>> {
    if aggregate.group_expr.len() < 2 {
        return Ok(None);
    }
    let mut below = aggregate.input.as_ref();
    while let LogicalPlan::SubqueryAlias(alias) = below {
        below = alias.input.as_ref();
    }
    let LogicalPlan::Union(union) = below else {
        return Ok(None);
    };
    // Aliases only rename: the aggregate's input columns are the union's,
    // position for position.
    let input = aggregate.input.schema();
    let Some((label_at, labels)) =
        aggregate
            .group_expr
            .iter()
            .enumerate()
            .find_map(|(at, expr)| {
                let Expr::Column(column) = expr else {
                    return None;
                };
                let field = input.index_of_column(column).ok()?;
                Some((at, labels(union, field)?))
            })
    else {
        return Ok(None);
    };

    let output = &aggregate.schema;
    let mut branches = Vec::with_capacity(union.inputs.len());
    for (branch, label) in union.inputs.iter().zip(labels) {
        let onto_branch = |expr: &Expr| onto(expr, input, branch.schema());
        let group = aggregate
            .group_expr
            .iter()
            .enumerate()
            .filter(|&(at, _)| at != label_at)
            .map(|(_, expr)| onto_branch(expr))
            .collect::<Result<Vec<_>>>()?;
        let aggr = aggregate
            .aggr_expr
            .iter()
            .map(onto_branch)
            .collect::<Result<Vec<_>>>()?;
        let grouped = Aggregate::try_new(branch.clone(), group, aggr)?;
        // The label goes back where it was among the aggregate's columns,
        // and every column takes the aggregate's own name.
        let grouped_schema = grouped.schema.clone();
        let column = |at: usize| Expr::Column(Column::from(grouped_schema.qualified_field(at)));
        let exprs = (0..output.fields().len())
            .map(|at| {
                let expr = match at.cmp(&label_at) {
                    std::cmp::Ordering::Less => column(at),
                    std::cmp::Ordering::Equal => label.clone(),
                    std::cmp::Ordering::Greater => column(at - 1),
                };
                let (qualifier, field) = output.qualified_field(at);
                expr.alias_qualified(qualifier.cloned(), field.name())
            })
            .collect();
        branches.push(Arc::new(LogicalPlan::Projection(Projection::try_new(
            exprs,
            Arc::new(LogicalPlan::Aggregate(grouped)),
        )?)));
    }
    // A union's columns are unqualified (and renamed where names repeat):
    // give them the aggregate's names again.
    let union = Union::try_new(branches)?;
    let exprs = (0..output.fields().len())
        .map(|at| {
            let (qualifier, field) = output.qualified_field(at);
            Expr::Column(Column::from(union.schema.qualified_field(at)))
                .alias_qualified(qualifier.cloned(), field.name())
        })
        .collect();
    Ok(Some(LogicalPlan::Projection(Projection::try_new(
        exprs,
        Arc::new(LogicalPlan::Union(union)),
    )?)))
}

/// The literal each branch of `union` puts in its column `field`, if every
/// branch is a projection that does, none is null and no two are equal.
fn labels(union: &Union, field: usize) -> Option<Vec<Expr>> {
    let data_type = union.schema.field(field).data_type();
    let mut labels: Vec<Expr> = Vec::with_capacity(union.inputs.len());
    for branch in &union.inputs {
        let LogicalPlan::Projection(projection) = branch.as_ref() else {
            return None;
        };
        let label = projection.expr.get(field)?.clone().unalias();
        let Expr::Literal(value, _) = &label else {
            return None;
        };
        let repeated = labels
            .iter()
            .any(|l| matches!(l, Expr::Literal(other, _) if other == value));
        if value.is_null() || value.data_type() != *data_type || repeated {
            return None;
        }
        labels.push(label);
    }
    Some(labels)
}

/// `expr`, written over the union's columns (`from`), rewritten over one
/// branch's (`to`): the same positions.
fn onto(expr: &Expr, from: &DFSchema, to: &DFSchema) -> Result<Expr> {
    expr.clone()
        .transform(|expr| match expr {
            Expr::Column(column) => {
                let at = from.index_of_column(&column)?;
                Ok(Transformed::yes(Expr::Column(Column::from(
                    to.qualified_field(at),
                ))))
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use datafusion::common::tree_node::TreeNode;
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::sql::{OutputFormat, new_session, register_t, render};

    /// `t(k, v)` with a null key, in `ctx`.
    fn with_t(ctx: SessionContext) -> SessionContext {
        let keys = [Some("a"), Some("a"), Some("b"), None, Some("b"), Some("c")];
        register_t(&ctx, &keys, &[1, 2, 3, 4, 5, 6]);
        ctx
    }

    /// Whether the optimized plan aggregates in every branch of a union (the
    /// rewrite; DataFusion's own rules may then move the `HAVING` filter
    /// into the branches too).
    async fn aggregates_per_branch(ctx: &SessionContext, sql: &str) -> bool {
        let plan = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
        plan.exists(|node| {
            Ok(
                matches!(node, LogicalPlan::Union(union) if union.inputs.iter().all(|branch| {
                    branch
                        .exists(|n| Ok(matches!(n, LogicalPlan::Aggregate(_))))
                        .unwrap()
                })),
            )
        })
        .unwrap()
    }

    async fn csv(ctx: &SessionContext, sql: &str) -> String {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        render(&batches, OutputFormat::Csv).unwrap()
    }

    /// The answer with the rule and with DataFusion's own plan, and whether
    /// the rule rewrote the query.
    async fn check(sql: &str) -> (String, bool) {
        let ours = with_t(new_session());
        let plain = with_t(SessionContext::new());
        let answer = csv(&ours, sql).await;
        assert_eq!(answer, csv(&plain, sql).await, "{sql}");
        assert!(!aggregates_per_branch(&plain, sql).await);
        (answer, aggregates_per_branch(&ours, sql).await)
    }

    #[tokio::test]
    async fn labelled_branches_are_aggregated_apart_with_the_same_answer() {
        let sql = "WITH tagged AS (
                SELECT k, 'small' AS tag, v FROM t WHERE v < 4
                UNION ALL SELECT k, 'doubled', v * 2 FROM t
                UNION ALL SELECT k, 'none', v FROM t WHERE v > 100)
            SELECT k, tag, count(*) AS n, sum(v) AS s, stddev_pop(v) AS sd,
                   count(DISTINCT v % 2) AS parities
            FROM tagged GROUP BY k, tag HAVING count(*) >= 1 ORDER BY k, tag";
        let (answer, rewritten) = check(sql).await;
        assert!(rewritten, "{sql}");
        assert!(
            answer.starts_with("k,tag,n,s,sd,parities\na,doubled,2,6,1.0,1\na,small,2,3,0.5,2\n"),
            "{answer}"
        );
        // The null key is a group of its own in each branch.
        assert!(answer.contains("\n,doubled,1,8,0.0,1\n"), "{answer}");
        assert!(!answer.contains("none"), "{answer}");

        // The label first among the keys, and used inside an aggregate.
        let sql = "SELECT tag, k, max(tag) AS m, sum(v) AS s FROM (
                SELECT 'x' AS tag, k, v FROM t UNION ALL SELECT 'y', k, v FROM t WHERE k <> 'a')
            GROUP BY tag, k ORDER BY tag, k";
        let (answer, rewritten) = check(sql).await;
        assert!(rewritten, "{sql}");
        assert!(answer.contains("\ny,b,y,8\n"), "{answer}");
    }

    #[tokio::test]
    async fn other_shapes_keep_datafusions_plan() {
        for sql in [
            // Grouped by the label alone, an empty branch must give no row.
            "SELECT tag, count(*) AS n FROM (
                SELECT 'x' AS tag, v FROM t UNION ALL SELECT 'y', v FROM t WHERE v > 100)
             GROUP BY tag ORDER BY tag",
            // A label shared by two branches: their rows share groups.
            "SELECT k, tag, count(*) AS n FROM (
                SELECT k, 'x' AS tag FROM t UNION ALL SELECT k, 'x' FROM t)
             GROUP BY k, tag ORDER BY k",
            // A null label is no label.
            "SELECT k, tag, count(*) AS n FROM (
                SELECT k, 'x' AS tag FROM t UNION ALL SELECT k, NULL FROM t)
             GROUP BY k, tag ORDER BY k, tag",
            // A column, not a literal.
            "SELECT k, tag, count(*) AS n FROM (
                SELECT k, 'x' AS tag FROM t UNION ALL SELECT k, upper(k) FROM t)
             GROUP BY k, tag ORDER BY k, tag",
        ] {
            let (answer, rewritten) = check(sql).await;
            assert!(!rewritten, "{sql}\n{answer}");
        }
        let (answer, _) = check(
            "SELECT tag, count(*) AS n FROM (
                SELECT 'x' AS tag, v FROM t UNION ALL SELECT 'y', v FROM t WHERE v > 100)
             GROUP BY tag ORDER BY tag",
        )
        .await;
        assert_eq!(answer, "tag,n\nx,6\n");
    }
}
