"""Study files: YAML -> validated schema -> the ordered list of trials a sweep runs.

A study (see studies/*.yaml):

    name: smoke                       # results go to results/<name>/
    description: "..."
    repeats: 1                        # measure every trial this often (interleaved: A B A B, not A A B B)
    timeout_s: 300                    # per-trial wall-clock limit (spawn + build + measure)
    calibration: true                 # measure the device's matmul throughput at the start of each run
    executor: {name: local}           # where trials run (see `vitbench plugins`), options: {...}
    defaults:                         # trial fields and task parameters for every trial (scalars)
      device: cpu
      min_seconds: 0.5
    axes:                             # the grid: every combination of these lists
      model: [ViT-Nano/4, "tiny:bit"] # names, aliases or selectors family:<vit|bit|hybrid>, tiny:<family|all>
      task: [infer, train, max_batch, flops]
      resolution: [32, 64]
    zip:                              # lists of equal length varied together (one grid axis per group)
      - {model: [ViT-B/16, ViT-L/16], batch_size: [64, 32]}
    exclude:                          # drop grid combinations matching every field given (lists: any of),
      - {model: R-Nano, resolution: 64}   # as written or as the trial runs (native resolution, model[depth=3])
    include:                          # extra combinations: the fields given replace those axes, the other
      - {model: ViT-H/14, resolution: [224, 448]}   # axes still apply (a zip group it touches is dropped)

The fields a study may set, their types and defaults are the registered tasks' parameters (vitbench.tasks;
`vitbench plugins` lists them). Each trial keeps only the fields its task uses (flops ignores batch_size, so a
batch-size axis never repeats a FLOP count), and its key is a SHA-256 of that normalised config, the method
versions and the repeat index: re-running a study finds its finished trials.

Everything is checked before anything runs; every problem is reported at once with file, line, field and value,
as a ConfigError (the CLI exits 2).
"""

from vitbench.study.load import apply_sets, load_study, parse_study
from vitbench.study.reader import embedded_studies, resolve_study
from vitbench.study.trials import Study, Trial, trial_key

__all__ = ["Study", "Trial", "apply_sets", "embedded_studies", "load_study", "parse_study", "resolve_study",
           "trial_key"]
