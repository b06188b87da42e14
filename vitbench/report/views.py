"""The report's sections for the built-in record kinds (vitbench.report.parts): which table and figures each
kind's ok rows feed. The kinds are the tasks' declarations; the report depends on the tasks, never the reverse."""

from __future__ import annotations

from functools import partial

from vitbench.insight import report as inspect_report
from vitbench.report import (accuracy_plots, arch, devices, figure13, fit_figures, objectives, plots, serving,
                             tables)
from vitbench.report.caveats import CAVEAT
from vitbench.report.parts import Figure, NotDrawn, ReportPart, register_report, report_parts
from vitbench.report.tables import DOWNSTREAM, PRETRAIN
from vitbench.tasks import bench, flops, inspection, max_batch, serve

__all__ = ["report_parts"]  # every section, the built-in ones registered below included


def _fit_figure(make):
    """A scaling-law figure, or NotDrawn where the rows are too few to fit a law (vitbench.report.fit_figures)."""
    def draw(df):
        why = fit_figures.unfit_reason(df)
        return NotDrawn(why) if why else make(df)

    return draw


register_report(ReportPart(
    "throughput", "Throughput (median over repeats; min and max over the same repeats)", (bench.KIND,),
    tables.throughput_table,
    columns=("model", "backend", "task", "device", "devices", "parallelism", "precision", "compile", "timing",
             "resolution", "batch_size", "repeats", "img_per_s", "img_per_s_min", "img_per_s_max",
             "step_ms_median", "step_cv", "mfu", CAVEAT),
    figures=(Figure("throughput_vs_resolution", "Throughput vs input size (cf. paper Figure 12, left)",
                    plots.throughput_vs_resolution),),
    order=10))
register_report(ReportPart("backends", "Backends side by side (img/s as in the throughput table: median over "
                           "repeats; each backend's ratio to the default backend at the same settings, so with "
                           "compile off its speed-up over the default's eager step)", (bench.KIND,),
                           tables.backend_pivot, order=11))
register_report(ReportPart(
    "devices", "Throughput across devices (scaling efficiency against the study's 1-device trial)", (bench.KIND,),
    devices.scaling,
    columns=("model", "backend", "task", "device", "devices", "parallelism", "precision", "batch_size",
             "batch_per_device", "repeats", "img_per_s", "img_per_s_per_device", "scaling_efficiency",
             "speedup_same_global_batch", "mfu", CAVEAT),
    figures=(Figure("throughput_vs_devices", "Throughput vs devices", devices.throughput_vs_devices),
             Figure("efficiency_vs_devices", "Scaling efficiency vs devices", devices.efficiency_vs_devices)),
    order=12))
register_report(ReportPart(
    "max_batch", "Largest batch that fits (median over repeats; \u2265 N: the search reached its cap N, the "
    "largest batch is N or more; per device where devices > 1; process_peak_mib: the probe's whole-process peak, "
    "what was held to memory_limit_mib)", (max_batch.KIND,), tables.max_batch,
    # every key of the table but the family (the model's): rows of 1 and 2 devices, or compile on and off, read
    # as one configuration's rows with nothing to tell them apart; one value in every row folds into the caption
    columns=(*(k for k in tables.MAX_BATCH_KEYS if k != "family"), "max_batch", "peak_mem_mib", "process_peak_mib",
             "memory_limit_mib"),
    figures=(Figure("max_batch_vs_resolution", "Largest batch vs input size (cf. paper Figure 12, right)",
                    plots.max_batch_vs_resolution),),
    order=20))
register_report(ReportPart(
    "flops", "FLOPs per image (1 MAC = 2 FLOPs)", (flops.KIND,), tables.flops,
    columns=("model", "backend", "resolution", "params_m", "gflops", "gflops_fvcore", "gflops_torch_flop_counter",
             "gflops_xla"),
    figures=(Figure("gflops_vs_throughput", "Theoretical GFLOPs vs measured throughput",
                    plots.gflops_vs_throughput, kinds=(bench.KIND, flops.KIND)),),
    order=30))
register_report(ReportPart(
    "accuracy", "Transfer accuracy (median over repeats)", DOWNSTREAM, tables.accuracy,
    figures=(Figure("accuracy_vs_compute", "Accuracy vs pre-training compute, Pareto front (cf. paper Figure 5)",
                    accuracy_plots.accuracy_vs_compute),
             Figure("fit_curves", "Error vs pre-training compute with fitted scaling laws and their 95 % bands "
                    "(docs/scaling-laws.md)", _fit_figure(fit_figures.fitted_curves)),
             Figure("compute_frontier", "Which model and family is best at each compute budget",
                    _fit_figure(fit_figures.compute_frontier)),
             Figure("throughput_vs_accuracy", "Inference throughput vs accuracy: what accuracy a speed buys "
                    "(cf. DeiT Figure 1)",
                    partial(fit_figures.throughput_vs_accuracy, speed_task=bench.Infer.name),
                    kinds=(bench.KIND, *DOWNSTREAM))),
    order=40))
register_report(ReportPart(  # accuracy and measured speed side by side (vitbench.report.figure13)
    "figure13", "Accuracy, compute and measured speed per family (cf. paper Figure 13): accuracy at each model's "
    "largest pre-training budget (mean over seeds), peak inference img/s (median over repeats, best batch) at the "
    "benchmark's input size",
    (bench.KIND, flops.KIND, *DOWNSTREAM), figure13.table,
    figures=(Figure("figure13", "Accuracy vs pre-training compute and vs measured speed; GFLOPs vs measured img/s "
                    "per family and backend (cf. paper Figure 13)", figure13.figure),),
    order=42))
register_report(ReportPart(
    "distillation", "Distillation (DeiT): accuracy per student and teacher over seeds",
    (PRETRAIN, *DOWNSTREAM), tables.distillation,
    columns=("kind", "shots", "model", "teacher", "distillation", "seeds", "accuracy_mean", "accuracy_std",
             "accuracy_min", "accuracy_max", "gain_vs_no_teacher", "gain_wins", "teacher_accuracy",
             "teacher_train_accuracy", "teacher_agreement"),
    figures=(Figure("distilled_accuracy_vs_throughput",
                    "Accuracy vs inference throughput, distilled and plain (cf. DeiT Figure 1)",
                    accuracy_plots.distilled_accuracy_vs_throughput, kinds=(*DOWNSTREAM, bench.KIND)),),
    order=41))
register_report(ReportPart(
    "objective", "Pre-training objective: transfer accuracy against pre-training compute (cf. paper Sec. 4.6)",
    DOWNSTREAM, objectives.objectives,
    figures=(Figure("objective_accuracy_vs_compute", "Transfer accuracy vs pre-training compute per objective "
                    "(supervised, masked patch prediction per target and mask rate, none); bars: seeds' min..max",
                    objectives.accuracy_vs_compute),),
    order=43))
# The paper's controlled architecture experiments (ViT appendix D.2-D.4), shown when a study's models vary them
# (the overrides in the models' names: vitbench.models.overrides); empty sections are left out of the report.
register_report(ReportPart(
    "shape", "Transformer shape: accuracy per varied dimension, over seeds (cf. paper Figure 8)", DOWNSTREAM,
    arch.shape_table,
    columns=("series", "dimension", "value", "seeds", "accuracy_mean", "accuracy_std", "pretrain_exaflops",
             "params_m"),
    figures=(Figure("shape_accuracy_vs_compute", "Accuracy vs pre-training compute, one panel per varied "
                    "dimension (cf. paper Figure 8)", arch.shape_figure),),
    order=44))
register_report(ReportPart(
    "head", "Class token vs global average pooling across pre-training learning rates (cf. paper Figure 9)",
    (PRETRAIN, *DOWNSTREAM), arch.head_table,
    columns=("series", "head", "pretrain_lr", "seeds", "accuracy_mean", "accuracy_std", "best"),
    figures=(Figure("head_accuracy_vs_lr", "Accuracy vs pre-training learning rate per head type (cf. paper "
                    "Figure 9)", arch.head_figure),),
    order=45))
register_report(ReportPart(
    "inspect", "What the upstream models learned (cf. paper Figure 7 and 11)", (inspection.KIND,),
    inspect_report.table,
    figures=(Figure("attention_distance", "Mean attention distance per head vs depth (cf. paper Figure 7 right, "
                    "Figure 11)", inspect_report.distance_comparison),),
    order=45))
register_report(ReportPart(
    "posemb", "Position embeddings: kind x place, over seeds (cf. paper Table 8)", (PRETRAIN, *DOWNSTREAM),
    arch.posemb_table,
    columns=("series", "posemb", "posemb_at", "seeds", "accuracy_mean", "accuracy_std", "accuracy_min",
             "accuracy_max", "vs_default"),
    figures=(Figure("posemb_accuracy", "Accuracy per position-embedding kind and place, each seed a dot (cf. "
                    "paper Table 8)", arch.posemb_figure),),
    order=46))
register_report(ReportPart(
    "serve", "Serving under MLPerf's LoadGen (docs/serving.md): Server, the highest target QPS judged VALID at "
    "the latency bound; SingleStream/MultiStream, latency percentiles; Offline, samples/s beside the throughput "
    "mode (median over repeats)", (serve.KIND,), serving.table, columns=serving.COLUMNS,
    figures=(Figure("latency_vs_qps", "Latency vs target QPS per configuration (model, backend, batch, ...), "
                    "every LoadGen Server run, of error rows too (filled: VALID, hollow: INVALID; dashed: the "
                    "latency bound)",
                    serving.latency_vs_qps, failed=True),),
    order=25))
