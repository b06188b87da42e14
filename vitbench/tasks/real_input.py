"""Training throughput with real input, beside the synthetic figure: the `train` task's `real_input_*` fields
(vitbench.protocols.input_bench; `vitbench bench --task train --data NAME` sets them, and so may a study).

Each field is a DataConfig field under a `real_input_` name (REAL_INPUT_PATHS, generated from DataConfig and the
formats table, so a format's own option needs no line here), typed and bounded as DataConfig declares it, plus
`real_input_steps`. All are left out of the trial's key at their defaults, so every `train` trial keyed before
they existed keeps its key. `real_input_dataset` unset (the default): no real-input run, and the other fields must
be unset too (never silently ignored).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ValidationInfo, create_model, model_validator

from vitbench.tasks.fields import MAX_COUNT, data_twins, named
from vitbench.transfer.config import DataConfig, key_neutral, validated
from vitbench.transfer.formats import format_options

PREFIX = "real_input_"
# study field -> the DataConfig field it sets (the dataset, where it is, how it is read, each format's options)
REAL_INPUT_PATHS = {PREFIX + f: f for f in ("dataset", "path", "test_path", "skip_corrupt", "check_data",
                                            "workers", *format_options())}
REAL_INPUT_PATHS[PREFIX + "dataset"] = "name"
# what the real-input run reads beside the source: every class, nothing held out (only `train` is timed)
_SPLIT = {"classes": None, "val_fraction": 0.0}


class _Steps(BaseModel):
    # the paths a study or --set may write for these fields: `real_input.<DataConfig field>`
    PATHS: ClassVar[dict[str, str]] = {f"real_input.{path}": field for field, path in REAL_INPUT_PATHS.items()}
    # the real-input run's own length; its windows, warm-up and seconds are the synthetic run's (Timing)
    real_input_steps: int = key_neutral(20, gt=0, le=MAX_COUNT,
                                        description="with real_input_dataset: timed training steps on the real "
                                                    "images at least")

    @model_validator(mode="after")
    def _real_input(self, info: ValidationInfo):
        """Real-input fields without `real_input_dataset` are refused (they would be ignored); with it, the data
        settings are checked here (DataConfig's rules), so a study fails when it is parsed and `bench` before any
        timing, each naming the field as its user wrote it (`named`)."""
        given = [f for f in (*REAL_INPUT_PATHS, "real_input_steps")
                 if getattr(self, f) != type(self).model_fields[f].get_default(call_default_factory=False)]
        if getattr(self, PREFIX + "dataset") is None:
            if given:
                raise ValueError(f"{', '.join(named(info, f) for f in given)}: real input settings without "
                                 f"{named(info, PREFIX + 'dataset')} (they would be ignored)")
            return self
        devices = getattr(self, "devices", 1)
        if devices > 1:  # the transfer loop runs on one device, at the global batch (protocols/input_bench.py)
            raise ValueError(f"{named(info, PREFIX + 'dataset')} times the training loop on one device; with "
                             f"{named(info, 'devices')} {devices} its figures would be one device's at {devices}x "
                             f"the per-device batch: measure real input with {named(info, 'devices')} 1")
        from vitbench.errors import ConfigError

        try:
            self.real_input_data(info)
        except ConfigError as e:
            raise ValueError(str(e)) from None
        return self

    def real_input_data(self, info: ValidationInfo | None = None) -> DataConfig | None:
        """The real-input run's DataConfig (None: no real input); a bad setting is a ConfigError naming it as
        the validation `info` (else these params' user: TaskParams.name_of) names it."""
        if getattr(self, PREFIX + "dataset") is None:
            return None

        def name(field: str) -> str:
            return named(info, field) if info is not None else self.name_of(field)

        data = {path: getattr(self, field) for field, path in REAL_INPUT_PATHS.items()}
        return validated(DataConfig, {**{k: v for k, v in data.items() if v is not None}, **_SPLIT},
                         name(PREFIX + "dataset"), {path: name(field) for field, path in REAL_INPUT_PATHS.items()})


# the dataset at None: no real input
RealInput = create_model("RealInput", __base__=_Steps, __module__=__name__,
                         **data_twins(REAL_INPUT_PATHS, {PREFIX + "dataset": None}))
