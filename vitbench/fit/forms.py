"""The scaling-law forms: error E against compute C, as nested special cases of one saturating power law.

    E(C) = e_inf + a * (C + c0)^(-b)

- `saturating`: all four free. Zhai et al. 2022 ("Scaling Vision Transformers", Sec. 3.1, Fig. 2) fit this
  "double-saturating" law to ViT error against compute: e_inf is the error no amount of compute removes, c0
  bends the curve flat at small budgets (E(0) = e_inf + a * c0^-b is finite), b is the scaling exponent.
- `offset`: c0 = 0, E = e_inf + a * C^-b. Alabdulmohsin et al. 2022 ("Revisiting Neural Scaling Laws", M2);
  the compute term of the SoViT law (Alabdulmohsin et al. 2023, Eq. 2) for one fixed shape.
- `power`: e_inf = c0 = 0, E = a * C^-b, the plain power law (Kaplan et al. 2020; Revisiting..., M1).

Units: e_inf in the error's units; c0 in the compute column's units; a in error units x compute^b (so it
changes with the compute unit; b and e_inf do not). Every form is one row of FORMS; the estimator
(vitbench.fit.estimate) fits whichever parameters a form leaves free.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

# The parameters of the general law, in the order the estimator keeps them.
PARAMS: tuple[str, ...] = ("e_inf", "a", "b", "c0")


class FormName(str, Enum):
    SATURATING = "saturating"
    OFFSET = "offset"
    POWER = "power"


@dataclass(frozen=True)
class Form:
    name: FormName
    free: tuple[str, ...]  # parameters fitted; the others are fixed at 0
    formula: str
    source: str

    @property
    def n_params(self) -> int:
        return len(self.free)

    def predict(self, params: dict[str, float], compute) -> np.ndarray:
        """E(C) for user-unit `params` (missing ones are 0), evaluated in log space so a * C^-b never overflows."""
        c = np.asarray(compute, dtype=float)
        log_term = np.log(params["a"]) - params["b"] * np.log(c + params.get("c0", 0.0))
        return params.get("e_inf", 0.0) + np.exp(log_term)


FORMS: dict[FormName, Form] = {f.name: f for f in (
    Form(FormName.SATURATING, ("e_inf", "a", "b", "c0"), "E = e_inf + a*(C + c0)^(-b)",
         "Zhai et al. 2022, Scaling Vision Transformers, Sec. 3.1"),
    Form(FormName.OFFSET, ("e_inf", "a", "b"), "E = e_inf + a*C^(-b)",
         "Alabdulmohsin et al. 2022, Revisiting Neural Scaling Laws, M2"),
    Form(FormName.POWER, ("a", "b"), "E = a*C^(-b)", "Kaplan et al. 2020; Alabdulmohsin et al. 2022, M1"),
)}
