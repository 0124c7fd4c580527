//! A physical join for an equality plus a range, the shape of every
//! "history window" question over a trace:
//!
//! ```sql
//! FROM job_means a JOIN job_means b ON a.user = b.user
//! WHERE b.end_time_us < a.submit_time_us
//!   AND b.end_time_us >= a.submit_time_us - 259200000000
//! ```
//!
//! DataFusion plans it as a hash join on `user` whose filter is evaluated
//! on every pair of rows with equal keys: a user with many jobs yields
//! every pair of them (2.9 M in the shared trace's Q4, half of which pass
//! the range), each found by walking the hash chain, compared key by key
//! and then filtered. [`BandJoinExec`] keeps the build side's rows per key
//! sorted by the range's build-side value and finds each probe row's
//! matches by binary search, so it touches only the rows it returns.
//!
//! [`BandJoin`] is the physical optimizer rule that puts it in place of a
//! [`HashJoinExec`] whose filter is nothing but such range comparisons; any
//! other join keeps DataFusion's plan.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::{cast, concat_batches, take};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinSide, JoinType, NullEquality, internal_datafusion_err};
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coop::make_cooperative;
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, RecordOutput, Time,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, InputDistributionRequirements,
    PlanProperties, SendableRecordBatchStream, apply_expression_roots,
};
use futures::{StreamExt, TryStreamExt, stream};

type KeyMap<V> = std::collections::HashMap<Box<[u8]>, V, foldhash::fast::RandomState>;

/// Replaces a [`HashJoinExec`] by a [`BandJoinExec`] where the join is an
/// inner join on equal keys (NULL equal to nothing) whose filter is a
/// conjunction of `<`, `<=`, `>` or `>=` comparisons, each between an
/// integer or timestamp term of one side and one of the other, a term
/// being a column plus or minus integer literals. Runs before DataFusion's
/// late filter pushdown, so the replaced join never hands out a dynamic
/// filter it would not fill.
#[derive(Debug, Default)]
pub struct BandJoin;

impl PhysicalOptimizerRule for BandJoin {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let band = match node.downcast_ref::<HashJoinExec>() {
                Some(join) => BandJoinExec::try_from_hash_join(join)?,
                None => None,
            };
            Ok(match band {
                Some(band) => Transformed::yes(Arc::new(band) as Arc<dyn ExecutionPlan>),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "band_join"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// One range comparison, normalised to `build OP probe`.
#[derive(Debug, Clone)]
struct Bound {
    /// The build side's term, over the build side's columns.
    build: Arc<dyn PhysicalExpr>,
    /// `<`, `<=`, `>` or `>=`, with the build term on the left.
    op: Operator,
    /// The probe side's term, over the probe side's columns.
    probe: Arc<dyn PhysicalExpr>,
}

impl Bound {
    fn holds(&self, build: i64, probe: i64) -> bool {
        match self.op {
            Operator::Lt => build < probe,
            Operator::LtEq => build <= probe,
            Operator::Gt => build > probe,
            _ => build >= probe,
        }
    }

    /// The rows of `sorted` (ascending) that satisfy the bound against
    /// `probe`.
    fn range_in(&self, sorted: &[i64], probe: i64) -> Range<usize> {
        match self.op {
            Operator::Lt => 0..sorted.partition_point(|&b| b < probe),
            Operator::LtEq => 0..sorted.partition_point(|&b| b <= probe),
            Operator::Gt => sorted.partition_point(|&b| b <= probe)..sorted.len(),
            _ => sorted.partition_point(|&b| b < probe)..sorted.len(),
        }
    }
}

/// A join of the left (build) and right (probe) inputs on equal keys and
/// every one of a set of range [`Bound`]s. Produces what the
/// [`HashJoinExec`] it replaces would have (same schema, partitioning and
/// order of probe rows), so it keeps that join's plan properties.
#[derive(Debug)]
pub struct BandJoinExec {
    /// The replaced join: its inputs, keys, filter, projection and mode.
    join: HashJoinExec,
    bounds: Arc<[Bound]>,
    /// Each output column: from the build side (`Left`) or the probe side.
    output: Arc<[(JoinSide, usize)]>,
    /// The build side, collected once for all partitions (`CollectLeft`).
    shared_build: Arc<tokio::sync::OnceCell<Arc<BuildSide>>>,
    metrics: ExecutionPlanMetricsSet,
}

impl BandJoinExec {
    /// The band join doing `join`'s work, or `None` when `join` is not of
    /// the shape it handles.
    pub fn try_from_hash_join(join: &HashJoinExec) -> Result<Option<Self>> {
        let Some(filter) = join.filter() else {
            return Ok(None);
        };
        let ordinary = *join.join_type() == JoinType::Inner
            && join.null_equality() == NullEquality::NullEqualsNothing
            && matches!(
                join.partition_mode(),
                PartitionMode::CollectLeft | PartitionMode::Partitioned
            )
            && join.fetch().is_none();
        if !ordinary || !keys_supported(join)? {
            return Ok(None);
        }
        let Some(bounds) = bounds_of(filter)? else {
            return Ok(None);
        };
        let left_len = join.left().schema().fields().len();
        let output: Vec<(JoinSide, usize)> = match &join.projection {
            Some(projection) => projection.iter().copied().collect::<Vec<_>>(),
            None => (0..join.join_schema().fields().len()).collect(),
        }
        .into_iter()
        .map(|i| {
            if i < left_len {
                (JoinSide::Left, i)
            } else {
                (JoinSide::Right, i - left_len)
            }
        })
        .collect();
        Ok(Some(Self {
            join: join.builder().build()?,
            bounds: bounds.into(),
            output: output.into(),
            shared_build: Arc::default(),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn from_join(join: HashJoinExec) -> Result<Arc<dyn ExecutionPlan>> {
        let band = Self::try_from_hash_join(&join)?
            .ok_or_else(|| internal_datafusion_err!("BandJoinExec: its join changed shape"))?;
        Ok(Arc::new(band))
    }
}

/// Keys that compare equal exactly when their row-format bytes do, and of
/// the same type on both sides.
fn keys_supported(join: &HashJoinExec) -> Result<bool> {
    let (left, right) = (join.left().schema(), join.right().schema());
    for (l, r) in join.on() {
        let (lt, rt) = (l.data_type(&left)?, r.data_type(&right)?);
        let comparable = exact_in_64_bits(&lt)
            || matches!(
                lt,
                DataType::Boolean
                    | DataType::UInt64
                    | DataType::Date32
                    | DataType::Date64
                    | DataType::Decimal128(_, _)
                    | DataType::Utf8
                    | DataType::LargeUtf8
                    | DataType::Utf8View
                    | DataType::Binary
                    | DataType::LargeBinary
                    | DataType::BinaryView
            );
        if !comparable || lt != rt {
            return Ok(false);
        }
    }
    Ok(!join.on().is_empty())
}

/// The filter as range bounds, when every conjunct is one; `None` when a
/// conjunct is anything else.
fn bounds_of(filter: &JoinFilter) -> Result<Option<Vec<Bound>>> {
    let mut conjuncts = vec![Arc::clone(filter.expression())];
    let mut bounds = Vec::new();
    while let Some(expr) = conjuncts.pop() {
        let Some(binary) = expr.downcast_ref::<BinaryExpr>() else {
            return Ok(None);
        };
        if *binary.op() == Operator::And {
            conjuncts.push(Arc::clone(binary.left()));
            conjuncts.push(Arc::clone(binary.right()));
            continue;
        }
        if !matches!(
            binary.op(),
            Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
        ) {
            return Ok(None);
        }
        let (Some(lhs), Some(rhs)) = (term(binary.left(), filter)?, term(binary.right(), filter)?)
        else {
            return Ok(None);
        };
        if lhs.data_type != rhs.data_type {
            return Ok(None);
        }
        let bound = match (lhs.side, rhs.side) {
            (JoinSide::Left, JoinSide::Right) => Bound {
                build: lhs.expr,
                op: *binary.op(),
                probe: rhs.expr,
            },
            (JoinSide::Right, JoinSide::Left) => Bound {
                build: rhs.expr,
                op: binary.op().swap().expect("comparisons swap"),
                probe: lhs.expr,
            },
            _ => return Ok(None),
        };
        bounds.push(bound);
    }
    bounds.reverse();
    Ok(Some(bounds))
}

/// Integer and timestamp types whose values, cast to `i64`, keep their
/// order.
fn exact_in_64_bits(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Timestamp(_, _)
    )
}

/// One side of a range comparison, rewritten over its own input's columns.
struct Term {
    expr: Arc<dyn PhysicalExpr>,
    side: JoinSide,
    data_type: DataType,
}

/// `expr` as a term of one side: columns of that side and integer
/// literals combined by `+` and `-` (DataFusion's wrapping arithmetic,
/// which cannot fail), of an integer or timestamp type.
fn term(expr: &Arc<dyn PhysicalExpr>, filter: &JoinFilter) -> Result<Option<Term>> {
    let data_type = expr.data_type(filter.schema())?;
    if !exact_in_64_bits(&data_type) {
        return Ok(None);
    }
    let mut side = None;
    let mut plain = true;
    expr.apply(|node| {
        if let Some(column) = node.downcast_ref::<Column>() {
            let index = filter.column_indices()[column.index()].side;
            plain &= side.is_none_or(|s| s == index);
            side = Some(index);
        } else if let Some(literal) = node.downcast_ref::<Literal>() {
            plain &= literal.value().data_type().is_integer() && !literal.value().is_null();
        } else if let Some(binary) = node.downcast_ref::<BinaryExpr>() {
            // Equal to the same expression built with the default
            // (wrapping) arithmetic: not one that fails on overflow.
            let wrapping = BinaryExpr::new(
                Arc::clone(binary.left()),
                *binary.op(),
                Arc::clone(binary.right()),
            );
            plain &= matches!(binary.op(), Operator::Plus | Operator::Minus) && *binary == wrapping;
        } else {
            plain = false;
        }
        Ok(if plain {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    })?;
    let Some(side) = side.filter(|_| plain) else {
        return Ok(None);
    };
    let expr = Arc::clone(expr)
        .transform(|node| {
            Ok(match node.downcast_ref::<Column>() {
                Some(column) => {
                    let index = filter.column_indices()[column.index()].index;
                    Transformed::yes(
                        Arc::new(Column::new(column.name(), index)) as Arc<dyn PhysicalExpr>
                    )
                }
                None => Transformed::no(node),
            })
        })?
        .data;
    Ok(Some(Term {
        expr,
        side,
        data_type,
    }))
}

impl DisplayAs for BandJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let on: Vec<String> = self
            .join
            .on()
            .iter()
            .map(|(l, r)| format!("({l}, {r})"))
            .collect();
        write!(
            f,
            "BandJoinExec: mode={:?}, on=[{}]",
            self.join.partition_mode(),
            on.join(", ")
        )?;
        if let Some(filter) = self.join.filter() {
            write!(f, ", filter={}", filter.expression())?;
        }
        if let Some(projection) = &self.join.projection {
            write!(f, ", projection={projection:?}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for BandJoinExec {
    fn name(&self) -> &'static str {
        "BandJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.join.properties()
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        self.input_distribution_requirements().into_per_child()
    }

    fn input_distribution_requirements(&self) -> InputDistributionRequirements {
        self.join.input_distribution_requirements()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        self.join.maintains_input_order()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![self.join.left(), self.join.right()]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let keys = self
            .join
            .on()
            .iter()
            .flat_map(|(l, r)| [Arc::clone(l), Arc::clone(r)]);
        let filter = self.join.filter().map(|f| Arc::clone(f.expression()));
        apply_expression_roots(keys.chain(filter), f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Self::from_join(self.join.builder().with_new_children(children)?.build()?)
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Self::from_join(self.join.builder().build()?)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let collect_left = *self.join.partition_mode() == PartitionMode::CollectLeft;
        let left = Arc::clone(self.join.left());
        let left_keys: Vec<_> = self.join.on().iter().map(|(l, _)| Arc::clone(l)).collect();
        let right_keys: Vec<_> = self.join.on().iter().map(|(_, r)| Arc::clone(r)).collect();
        let bounds = Arc::clone(&self.bounds);
        let shared = Arc::clone(&self.shared_build);
        let build_context = Arc::clone(&context);
        let build_time = MetricBuilder::new(&self.metrics).subset_time("build_time", partition);
        let build = async move {
            let build = || async {
                let left_partition = if collect_left { 0 } else { partition };
                let input = left.execute(left_partition, Arc::clone(&build_context))?;
                BuildSide::collect(input, &left_keys, &bounds, &build_context, &build_time)
                    .await
                    .map(Arc::new)
            };
            if collect_left {
                shared.get_or_try_init(build).await.map(Arc::clone)
            } else {
                build().await
            }
        };

        let probe = self.join.right().execute(partition, Arc::clone(&context))?;
        let schema = self.schema();
        let output = Arc::clone(&self.output);
        let bounds = Arc::clone(&self.bounds);
        let batch_size = context.session_config().batch_size();
        let output_metrics = BaselineMetrics::new(&self.metrics, partition);
        let elapsed = output_metrics.elapsed_compute().clone();
        let out_schema = Arc::clone(&schema);
        let joined = stream::once(async move {
            let build: Arc<BuildSide> = build.await?;
            let batches = probe.map(move |batch| {
                let matches = Matches::new(
                    Arc::clone(&build),
                    &right_keys,
                    Arc::clone(&bounds),
                    batch?,
                    Arc::clone(&output),
                    Arc::clone(&out_schema),
                    batch_size,
                    elapsed.clone(),
                )?;
                Ok::<_, DataFusionError>(stream::iter(matches))
            });
            Ok::<_, DataFusionError>(batches.try_flatten())
        })
        .try_flatten()
        .inspect_ok(move |batch| {
            batch.record_output(&output_metrics);
        });
        // One probe batch can give many output batches, produced without
        // polling the input: each takes from the task's budget, so a large
        // join still yields to the runtime (and can be cancelled).
        Ok(make_cooperative(Box::pin(RecordBatchStreamAdapter::new(
            schema, joined,
        ))))
    }
}

impl fmt::Debug for BuildSide {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("BuildSide")
            .field("rows", &self.batch.num_rows())
            .field("keys", &self.groups.len())
            .finish()
    }
}

/// The build side's rows, indexed: grouped by key, each group sorted by
/// the bounds' build terms.
struct BuildSide {
    batch: RecordBatch,
    converter: RowConverter,
    /// Each key's rows, as a range of `order`, and which bounds are sorted
    /// along it (the first always is).
    groups: KeyMap<(Range<usize>, Vec<bool>)>,
    /// Build row numbers, by group, then by the build terms' values.
    order: Vec<u32>,
    /// Per bound, its build term's value of each row of `order`.
    values: Vec<Vec<i64>>,
    _reservation: MemoryReservation,
}

impl BuildSide {
    async fn collect(
        input: SendableRecordBatchStream,
        keys: &[Arc<dyn PhysicalExpr>],
        bounds: &[Bound],
        context: &TaskContext,
        build_time: &Time,
    ) -> Result<Self> {
        let schema = input.schema();
        let batches: Vec<RecordBatch> = input.try_collect().await?;
        let _timer = build_time.timer();
        let batch = concat_batches(&schema, &batches)?;
        drop(batches);
        if u32::try_from(batch.num_rows()).is_err() {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "BandJoinExec indexes at most {} build rows, not {}",
                u32::MAX,
                batch.num_rows()
            )));
        }
        let reservation =
            MemoryConsumer::new("BandJoinExec build side").register(context.memory_pool());
        reservation.try_grow(batch.get_array_memory_size())?;

        let key_columns = evaluate(keys, &batch)?;
        let fields = key_columns
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)?;
        let rows = converter.convert_columns(&key_columns)?;
        let terms = bound_values(bounds.iter().map(|b| &b.build), &batch)?;

        // Rows that can match: no NULL key, no NULL term.
        let mut group_of: KeyMap<u32> = KeyMap::default();
        let mut keyed: Vec<(u32, u32)> = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            if key_columns.iter().any(|c| c.is_null(row)) || terms.iter().any(|t| t.is_null(row)) {
                continue;
            }
            let next = group_of.len() as u32;
            let group = *group_of
                .entry(rows.row(row).as_ref().into())
                .or_insert(next);
            keyed.push((group, row as u32));
        }
        keyed.sort_unstable_by(|&(ga, a), &(gb, b)| {
            ga.cmp(&gb).then_with(|| {
                terms
                    .iter()
                    .map(|t| t.value(a as usize).cmp(&t.value(b as usize)))
                    .find(|o| o.is_ne())
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
        });
        let order: Vec<u32> = keyed.iter().map(|&(_, row)| row).collect();
        let values: Vec<Vec<i64>> = terms
            .iter()
            .map(|t| order.iter().map(|&row| t.value(row as usize)).collect())
            .collect();
        let mut ranges = vec![0..0; group_of.len()];
        let mut start = 0;
        while start < keyed.len() {
            let group = keyed[start].0;
            let end = start + keyed[start..].partition_point(|&(g, _)| g == group);
            ranges[group as usize] = start..end;
            start = end;
        }
        let groups = group_of
            .into_iter()
            .map(|(key, group)| {
                let range = ranges[group as usize].clone();
                let sorted = values
                    .iter()
                    .map(|v| v[range.clone()].is_sorted())
                    .collect();
                (key, (range, sorted))
            })
            .collect();
        reservation.try_grow(order.len() * 4 * (1 + 2 * values.len()) + rows.size())?;
        Ok(Self {
            batch,
            converter,
            groups,
            order,
            values,
            _reservation: reservation,
        })
    }
}

fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
        .collect()
}

/// The terms' values over `batch`, as 64-bit integers.
fn bound_values<'a>(
    terms: impl Iterator<Item = &'a Arc<dyn PhysicalExpr>>,
    batch: &RecordBatch,
) -> Result<Vec<Int64Array>> {
    terms
        .map(|term| {
            let values = term.evaluate(batch)?.into_array(batch.num_rows())?;
            let values = cast(&values, &DataType::Int64)?;
            Ok(values
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("cast to Int64")
                .clone())
        })
        .collect()
}

/// The joined rows of one probe batch, produced `batch_size` at a time.
struct Matches {
    build: Arc<BuildSide>,
    bounds: Arc<[Bound]>,
    probe: RecordBatch,
    keys: Rows,
    key_valid: Vec<bool>,
    terms: Vec<Int64Array>,
    output: Arc<[(JoinSide, usize)]>,
    schema: SchemaRef,
    batch_size: usize,
    elapsed: Time,
    /// The next probe row to look at.
    next: usize,
    /// The probe row being joined, what is left of its candidates, and
    /// whether every bound is sorted along them (else each candidate is
    /// checked).
    current: usize,
    candidates: Range<usize>,
    all_sorted: bool,
}

impl Matches {
    #[allow(clippy::too_many_arguments)]
    fn new(
        build: Arc<BuildSide>,
        keys: &[Arc<dyn PhysicalExpr>],
        bounds: Arc<[Bound]>,
        probe: RecordBatch,
        output: Arc<[(JoinSide, usize)]>,
        schema: SchemaRef,
        batch_size: usize,
        elapsed: Time,
    ) -> Result<Self> {
        let timer = elapsed.timer();
        let key_columns = evaluate(keys, &probe)?;
        let key_valid = (0..probe.num_rows())
            .map(|row| key_columns.iter().all(|c| c.is_valid(row)))
            .collect();
        let keys = build.converter.convert_columns(&key_columns)?;
        let terms = bound_values(bounds.iter().map(|b| &b.probe), &probe)?;
        timer.done();
        Ok(Self {
            build,
            bounds,
            probe,
            keys,
            key_valid,
            terms,
            output,
            schema,
            batch_size: batch_size.max(1),
            elapsed,
            next: 0,
            current: 0,
            candidates: 0..0,
            all_sorted: true,
        })
    }

    /// Moves to the next probe row with a key in the build side, no NULL
    /// term and candidates: the build rows every sorted bound allows.
    fn next_row(&mut self) -> bool {
        while self.next < self.probe.num_rows() {
            let row = self.next;
            self.next += 1;
            if !self.key_valid[row] || self.terms.iter().any(|t| t.is_null(row)) {
                continue;
            }
            let Some((range, sorted)) = self.build.groups.get(self.keys.row(row).as_ref()) else {
                continue;
            };
            let mut candidates = range.clone();
            for (k, bound) in self.bounds.iter().enumerate() {
                if sorted[k] {
                    let values = &self.build.values[k][range.clone()];
                    let allowed = bound.range_in(values, self.terms[k].value(row));
                    candidates.start = candidates.start.max(range.start + allowed.start);
                    candidates.end = candidates.end.min(range.start + allowed.end);
                }
            }
            if candidates.start < candidates.end {
                self.current = row;
                self.candidates = candidates;
                self.all_sorted = sorted.iter().all(|&s| s);
                return true;
            }
        }
        false
    }

    /// Appends matches until `batch_size` of them or the batch's end.
    fn fill(&mut self, build_rows: &mut Vec<u32>, probe_rows: &mut Vec<u32>) {
        while build_rows.len() < self.batch_size {
            if self.candidates.is_empty() && !self.next_row() {
                return;
            }
            let row = self.current;
            let take = self
                .candidates
                .len()
                .min(self.batch_size - build_rows.len());
            let chosen = self.candidates.start..self.candidates.start + take;
            self.candidates.start += take;
            for i in chosen {
                let holds = self.all_sorted
                    || self.bounds.iter().enumerate().all(|(k, bound)| {
                        bound.holds(self.build.values[k][i], self.terms[k].value(row))
                    });
                if holds {
                    build_rows.push(self.build.order[i]);
                    probe_rows.push(row as u32);
                }
            }
        }
    }

    fn batch(&self, build_rows: Vec<u32>, probe_rows: Vec<u32>) -> Result<RecordBatch> {
        let num_rows = build_rows.len();
        let build_rows = UInt32Array::from(build_rows);
        let probe_rows = UInt32Array::from(probe_rows);
        let columns = self
            .output
            .iter()
            .map(|&(side, i)| match side {
                JoinSide::Left => take(self.build.batch.column(i), &build_rows, None),
                _ => take(self.probe.column(i), &probe_rows, None),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(num_rows));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &options,
        )?)
    }
}

impl Iterator for Matches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let elapsed = self.elapsed.clone();
        let timer = elapsed.timer();
        let mut build_rows = Vec::with_capacity(self.batch_size);
        let mut probe_rows = Vec::with_capacity(self.batch_size);
        self.fill(&mut build_rows, &mut probe_rows);
        if build_rows.is_empty() {
            return None;
        }
        let batch = self.batch(build_rows, probe_rows);
        timer.done();
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::new_session;
    use arrow::array::{Float64Array, Int32Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use arrow::util::pretty::pretty_format_batches;
    use datafusion::datasource::MemTable;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::{SessionConfig, SessionContext};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// `name(id, k, k2, s, t, c, x)`: `rows` rows in two batches, keys from
    /// a few values (and NULL), `s` and `t` from a narrow range (ties)
    /// with NULLs, and, if `extreme`, some `s` at the ends of the 64-bit
    /// range, where `s - 5` wraps around.
    fn table(rng: &mut ChaCha8Rng, rows: usize, extreme: bool) -> MemTable {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("k", DataType::Utf8, true),
            Field::new("k2", DataType::Int32, false),
            Field::new("s", DataType::Int64, true),
            Field::new("t", DataType::Int64, false),
            Field::new("c", DataType::Int32, false),
            Field::new("x", DataType::Float64, false),
        ]));
        let keys = [
            "u1",
            "u2",
            "u3",
            "a-much-longer-user-name-hash-0123456789abcdef",
        ];
        let mut batches = Vec::new();
        for part in 0..2 {
            let ids: Vec<i64> = (0..rows / 2)
                .map(|i| (part * rows / 2 + i) as i64)
                .collect();
            let k: Vec<Option<&str>> = ids
                .iter()
                .map(|_| (!rng.random_bool(0.1)).then(|| keys[rng.random_range(0..keys.len())]))
                .collect();
            let k2: Vec<i32> = ids.iter().map(|_| rng.random_range(0..2)).collect();
            let s: Vec<Option<i64>> = ids
                .iter()
                .map(|_| match rng.random_range(0..20) {
                    0 => None,
                    1 if extreme => Some(i64::MIN + rng.random_range(0..8)),
                    2 if extreme => Some(i64::MAX - rng.random_range(0..8)),
                    _ => Some(rng.random_range(0..40)),
                })
                .collect();
            let t: Vec<i64> = ids.iter().map(|_| rng.random_range(0..40)).collect();
            let c: Vec<i32> = ids.iter().map(|_| rng.random_range(-10..10)).collect();
            let x: Vec<f64> = ids
                .iter()
                .map(|_| f64::from(rng.random_range(0..3)))
                .collect();
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(k)),
                Arc::new(Int32Array::from(k2)),
                Arc::new(Int64Array::from(s)),
                Arc::new(Int64Array::from(t)),
                Arc::new(Int32Array::from(c)),
                Arc::new(Float64Array::from(x)),
            ];
            batches.push(vec![
                RecordBatch::try_new(Arc::clone(&schema), columns).unwrap(),
            ]);
        }
        MemTable::try_new(schema, batches).unwrap()
    }

    /// How the joins are run: `extreme` times in the tables, the batch
    /// size, and whether the build side is partitioned by key (else
    /// collected once, as DataFusion does with small build sides).
    #[derive(Debug, Clone, Copy)]
    struct Setup {
        extreme: bool,
        batch_size: usize,
        partitioned: bool,
    }

    impl Setup {
        /// Plain tables, the build side collected once.
        fn collected(batch_size: usize) -> Self {
            Setup {
                extreme: false,
                batch_size,
                partitioned: false,
            }
        }
    }

    /// jobcast's session and DataFusion's own, both with the same tables
    /// `a` and `b` and the same settings.
    async fn sessions(seed: u64, setup: Setup) -> [SessionContext; 2] {
        let band = new_session();
        let config =
            SessionConfig::new().with_target_partitions(band.state().config().target_partitions());
        let plain = SessionContext::new_with_config(config);
        let threshold = if setup.partitioned { 0 } else { 1 << 20 };
        for ctx in [&band, &plain] {
            for set in [
                format!("SET datafusion.execution.batch_size = {}", setup.batch_size),
                format!(
                    "SET datafusion.optimizer.hash_join_single_partition_threshold = {threshold}"
                ),
                format!(
                    "SET datafusion.optimizer.hash_join_single_partition_threshold_rows = {threshold}"
                ),
            ] {
                ctx.sql(&set).await.unwrap();
            }
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            ctx.register_table("a", Arc::new(table(&mut rng, 300, setup.extreme)))
                .unwrap();
            ctx.register_table("b", Arc::new(table(&mut rng, 200, setup.extreme)))
                .unwrap();
        }
        [band, plain]
    }

    async fn physical_plan(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
        let frame = ctx.sql(sql).await.unwrap();
        frame.create_physical_plan().await.unwrap()
    }

    async fn plan_text(ctx: &SessionContext, sql: &str) -> String {
        let plan = physical_plan(ctx, sql).await;
        displayable(plan.as_ref()).indent(true).to_string()
    }

    async fn answer(ctx: &SessionContext, sql: &str) -> String {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        pretty_format_batches(&batches).unwrap().to_string()
    }

    const BAND_JOINS: [&str; 8] = [
        // Q4's shape: a window before the build side's time.
        "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k \
         WHERE b.t < a.s AND b.t >= a.s - 5",
        // One bound, the other way round, not strict.
        "SELECT a.id, b.id, b.t FROM a JOIN b ON a.k = b.k WHERE a.s <= b.t",
        // Two keys; bounds on two build columns, which need not sort
        // together (the candidates are then checked one by one).
        "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k AND a.k2 = b.k2 \
         WHERE b.t > a.s + 2 AND b.t <= a.t",
        // Arithmetic on both sides.
        "SELECT a.id, b.id FROM a JOIN b ON a.k2 = b.k2 WHERE a.s - 3 > b.t + 1",
        // 32-bit integers, and a count over no columns.
        "SELECT count(*) FROM a JOIN b ON a.k = b.k WHERE a.c < b.c",
        // A bound between the same side's columns and one across.
        "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k WHERE a.t >= b.s AND b.s > a.s",
        // Q4's shape with the smaller table's time as the window's end:
        // with `extreme` rows, `b.s - 5` wraps and no longer sorts with `b.s`.
        "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k WHERE a.t < b.s AND a.t >= b.s - 5",
        // Bounds on two columns of each side: never sorted together.
        "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k WHERE a.s < b.t AND a.t > b.s",
    ];

    const SETUPS: [Setup; 4] = [
        Setup {
            extreme: false,
            batch_size: 8192,
            partitioned: false,
        },
        Setup {
            extreme: true,
            batch_size: 8192,
            partitioned: false,
        },
        Setup {
            extreme: false,
            batch_size: 3,
            partitioned: false,
        },
        Setup {
            extreme: true,
            batch_size: 5,
            partitioned: true,
        },
    ];

    #[tokio::test]
    async fn band_joins_answer_as_datafusion_does() {
        for seed in 0..4 {
            for setup in SETUPS {
                let [band, plain] = sessions(seed, setup).await;
                for query in BAND_JOINS {
                    let sql = format!("{query} ORDER BY 1, 2");
                    let sql = if query.contains("count(*)") {
                        query.to_string()
                    } else {
                        sql
                    };
                    let mode = if setup.partitioned {
                        "mode=Partitioned"
                    } else {
                        "mode=CollectLeft"
                    };
                    let plan = plan_text(&band, &sql).await;
                    assert!(
                        plan.contains(&format!("BandJoinExec: {mode}")),
                        "{sql}\n{plan}"
                    );
                    assert_eq!(
                        answer(&band, &sql).await,
                        answer(&plain, &sql).await,
                        "seed {seed}, {setup:?}: {sql}"
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn batches_hold_at_most_the_batch_size() {
        let [band, _] = sessions(7, Setup::collected(3)).await;
        let sql = "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k WHERE b.t < a.s";
        let plan = physical_plan(&band, sql).await;
        let mut joins = Vec::new();
        plan.apply(|node| {
            if node.is::<BandJoinExec>() {
                joins.push(Arc::clone(node));
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        assert_eq!(joins.len(), 1);
        let batches = collect(Arc::clone(&joins[0]), band.task_ctx())
            .await
            .unwrap();
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert!(rows > 100, "{rows} rows");
        assert!(batches.iter().all(|b| b.num_rows() <= 3));
        let expected = answer(&band, &format!("SELECT count(*) AS n FROM ({sql})")).await;
        assert!(expected.contains(&format!("| {rows} ")), "{expected}");
    }

    #[tokio::test]
    async fn other_joins_keep_datafusion_plan() {
        let [band, _] = sessions(1, Setup::collected(8192)).await;
        for sql in [
            // Not only ranges.
            "SELECT a.id FROM a JOIN b ON a.k = b.k WHERE b.t < a.s OR b.t > a.t",
            "SELECT a.id FROM a JOIN b ON a.k = b.k WHERE b.t <> a.s",
            "SELECT a.id FROM a JOIN b ON a.k = b.k WHERE b.t < a.s AND b.t * 2 > a.t",
            // A floating-point key.
            "SELECT a.id FROM a JOIN b ON a.x = b.x WHERE b.t < a.s",
            // Not an inner join.
            "SELECT a.id FROM a LEFT JOIN b ON a.k = b.k AND b.t < a.s",
            // No range at all.
            "SELECT a.id FROM a JOIN b ON a.k = b.k",
        ] {
            let plan = plan_text(&band, sql).await;
            assert!(!plan.contains("BandJoinExec"), "{sql}\n{plan}");
            assert!(plan.contains("HashJoinExec"), "{sql}\n{plan}");
        }
    }
}
