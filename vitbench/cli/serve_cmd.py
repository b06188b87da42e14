"""`vitbench serve`: one MLPerf scenario under LoadGen, thin over the `serve` task (vitbench.tasks.serve)."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import PRECISION_HELP, SET_FIELDS_HELP, console, print_json, task_params
from vitbench.cli.options import cli_option, from_field
from vitbench.numfmt import fmt
from vitbench.tasks import UNSTABLE_ROW, run_checked
from vitbench.tasks.serve import Serve

# the row's declared metrics (vitbench.tasks.serve.METRICS), in their order, but those the table's title says (the
# verdict) and the noise flag (`noise`, its reasons, says no more)
_ROWS = tuple(m.name for m in Serve.metrics
              if m is not UNSTABLE_ROW and m.name not in ("loadgen_valid", "loadgen_invalid_reason"))


@app.command("serve")
def serve_cmd(
    model: str = typer.Argument(..., help="Variant name, e.g. ViT-Nano/4, R-Nano."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_FIELDS_HELP),
    scenario: str = from_field(Serve.Params, "scenario", help="SingleStream | MultiStream | Server | Offline."),
    batch_size: int = from_field(Serve.Params, "batch_size", "--batch-size", "-b", min=1,
                                 help="The SUT's max batch."),
    max_wait_ms: float = from_field(Serve.Params, "max_wait_ms", help="The SUT's wait to fill a batch (ms)."),
    target_qps: float = typer.Option(None, "--target-qps", help="Server: one run at this rate (default: search "
                                     "for the highest VALID one); Offline: the expected rate."),
    latency_bound_ms: float = from_field(Serve.Params, "latency_bound_ms",
                                         help="Server: the latency bound (ms) the percentile is judged at."),
    latency_percentile: float = typer.Option(None, "--latency-percentile",
                                             help="Judged/reported percentile (default: the scenario's MLPerf "
                                                  "one)."),
    min_duration_s: float = from_field(Serve.Params, "min_duration_s", help="LoadGen's minimum run duration (s)."),
    min_query_count: int = typer.Option(None, "--min-query-count", help="LoadGen's minimum query count "
                                        "(default: the scenario's MLPerf one)."),
    samples_per_query: int = from_field(Serve.Params, "samples_per_query", help="MultiStream: samples per query."),
    loadgen_seed: int = typer.Option(None, "--loadgen-seed", help="LoadGen's seeds made from this one (default: "
                                     "mlperf.conf's)."),
    qps_tolerance: float = from_field(Serve.Params, "qps_tolerance", help="Server search: relative bracket width "
                                      "at which it stops."),
    max_probes: int = from_field(Serve.Params, "max_probes", help="Server search: LoadGen runs at most."),
    warmup: int = from_field(Serve.Params, "warmup_steps", "--warmup", help="Warm-up steps per batch size."),
    dataset: str = from_field(Serve.Params, "dataset", "--data", help="The QSL's images: a data source "
                              "(digits, synthetic, folder, npz, ...)."),
    data_path: str = typer.Option(None, "--data-path", help="The data source's local path."),
    qsl_images: int = from_field(Serve.Params, "qsl_images", help="The QSL's size at most."),
    resolution: int = typer.Option(None, "--resolution", "-r", help="Input size in pixels (default: native)."),
    precision: str = from_field(Serve.Params, "precision", help=PRECISION_HELP),
    backend: str = typer.Option(None, help="A registered backend (`vitbench plugins`; default: the first)."),
    device: str = from_field(Serve.Params, "device", help="cpu | cuda | cuda:N (torch); cpu | gpu | tpu (jax)."),
    threads: int = typer.Option(None, help="Intra-op threads (default: chosen per backend; recorded)."),
    seed: int = from_field(Serve.Params, "seed"),
    as_json: bool = cli_option("json", "--json", help="Print the whole record (LoadGen's logs included) as JSON."),
) -> None:
    """Serve a model under MLPerf's LoadGen: Server (the highest target QPS judged VALID at a p99 latency bound),
    SingleStream / MultiStream (latency percentiles) or Offline (samples/s beside vitbench's throughput mode).

    A batching SUT (--batch-size, --max-wait-ms) answers LoadGen's queries from a QSL of real or synthetic images;
    compilation and warm-up happen before any LoadGen run. Exit 1 when LoadGen judged the run INVALID (the reason
    is printed). docs/serving.md says what a CPU run can and cannot tell about a GPU server.
    """
    from vitbench.record import Status

    values = dict(model=model, scenario=scenario, batch_size=batch_size, max_wait_ms=max_wait_ms,
                  target_qps=target_qps, latency_bound_ms=latency_bound_ms, latency_percentile=latency_percentile,
                  min_duration_s=min_duration_s, min_query_count=min_query_count,
                  samples_per_query=samples_per_query, loadgen_seed=loadgen_seed, qps_tolerance=qps_tolerance,
                  max_probes=max_probes, warmup_steps=warmup, dataset=dataset, data_path=data_path,
                  qsl_images=qsl_images, resolution=resolution, precision=precision, backend=backend,
                  device=device, threads=threads, seed=seed)
    t, params = task_params(Serve.name, None, sets, command=serve_cmd, **values)
    rec = run_checked(t, params)
    if as_json:
        print_json(rec.to_dict())
    else:
        m, c = rec.metrics, rec.config
        verdict = "VALID" if m.get("loadgen_valid") else f"INVALID: {m.get('loadgen_invalid_reason')}"
        bound = f" | p{fmt(m.get('latency_percentile_judged'))} bound {fmt(c['latency_bound_ms'])} ms" \
            if c["scenario"] == "Server" else ""
        res = f" @ {c['resolution']}px" if c.get("resolution") else ""  # (the model's own when not given)
        table = Table(title=escape(f"{c['model']}{res} | {c['backend']} {c['device']} {c.get('precision', '')} | "
                                   f"{rec.env.get('threads')} threads | {c['scenario']}{bound} | max batch "
                                   f"{c.get('batch_size', 1)}, wait {fmt(c['max_wait_ms'])} ms | {verdict}"),
                      show_header=False)  # precision and threads: an int8 run's title was an fp32 one's
        table.add_column("field", style="bold")
        table.add_column("value", justify="right")
        for k in _ROWS:
            if m.get(k) is not None:
                table.add_row(escape(k), escape(fmt(m[k])))
        console.print(table)
    if rec.status is not Status.OK:
        if not as_json:
            console.print(f"[red]{rec.status}[/]: {escape(rec.error.message) if rec.error else ''}")
        raise typer.Exit(1)
