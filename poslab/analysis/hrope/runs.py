"""One run's analysis as the report holds it (``RunAnalysis``) and its JSON entry: what ``summary`` writes and
``from_summary`` reads back, torch-free, so that the tables and figures render from the summary alone."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from poslab.analysis.hrope.readings import INTERVENTIONS
from poslab.analysis.hrope.shape import SHAPE, last_displacement, shape_without_replicates
from poslab.analysis.hrope.well import Well
from poslab.analysis.stats import Estimate


@dataclass
class Depth:
    """U* under one ``Reading``, on all documents, and the shuffle test on the documents it can shuffle."""

    well: Well
    shuffled_well: Well
    depth: Estimate  # U* and its interval over documents
    shuffle_change: Estimate  # U*(shuffled) - U* on the shuffled documents


@dataclass(frozen=True)
class RunFacts:
    """What the report reads from a run's directory besides its analysis (``results.json``, Hydra's overrides),
    read once when the run is analysed and kept in the summary: bits/byte, training steps and the recipe's, and
    the results' data description (``corpus``, ``sources``, ``data_notes``; None: the run has no results.json);
    and the document replicates of the bits/byte (``compute.bits_per_byte_replicates``; empty: none), which the
    summary keeps with the other replicates (``RunAnalysis.entry``), not here. The defaults: nothing known."""

    val_bpb: float = math.nan
    steps: int | None = None
    recipe_steps: int | None = None
    results: dict[str, Any] | None = None
    val_bpb_replicates: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "val_bpb": None if math.isnan(self.val_bpb) else self.val_bpb,
            "steps": self.steps,
            "recipe_steps": self.recipe_steps,
            "results": self.results,
        }

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> RunFacts:
        bpb = saved.get("val_bpb")
        return cls(math.nan if bpb is None else float(bpb), saved.get("steps"), saved.get("recipe_steps"),
                   saved.get("results"))  # fmt: skip


@dataclass
class RunAnalysis:
    """One run's analysis: its well and shuffle test under every U* reading, its interventions, and the facts of
    its run directory the report shows (``RunFacts``)."""

    run_dir: str
    encoding: str
    corpus: str
    seed: int
    documents: int
    shuffled_documents: int  # documents with enough paragraphs to shuffle
    depths: dict[str, Depth]  # reading name -> U* and the shuffle test; "main" first
    interventions: dict[str, dict[str, Estimate]]  # reading -> {"merge": ..., "split": ...}
    frequencies: str | None = None  # the hRoPE encodings' allocation (None: not an hRoPE encoding)
    variant: str | None = None  # what else tells the encoding's runs apart (BiPE's inter:segment; compute.hierarchy)
    intervened: str = "paragraph"  # the coordinate the interventions changed (compute.hierarchy)
    config: Any = None  # the run's config (not in the summary)
    facts: RunFacts = field(default_factory=RunFacts)
    shape: dict[str, Estimate] | None = None  # the well's shape with its document replicates (None: not kept)

    @property
    def main(self) -> Depth:
        return self.depths["main"]

    @property
    def well(self) -> Well:
        return self.main.well

    @property
    def shuffled_well(self) -> Well:
        return self.main.shuffled_well

    @property
    def well_shape(self) -> dict[str, Estimate]:
        """The well's shape (``poslab.analysis.hrope.shape``: growth, recovery), with document replicates where the
        analysis kept them, else the values from the main well alone."""
        return self.shape if self.shape is not None else shape_without_replicates(self.well)

    @property
    def arm(self) -> str:
        """The encoding, with its frequency allocation for the hRoPE encodings (``hrope_axial:interleaved``) or its
        variant (``bipe:rope:sentence``)."""
        suffix = self.frequencies if self.frequencies is not None else self.variant
        return self.encoding if suffix is None else f"{self.encoding}:{suffix}"

    def variant_keys(self) -> dict[str, Any]:
        """The variant and the intervened coordinate, for a run that has a variant (the entries of the other runs
        read as before)."""
        return {} if self.variant is None else {"variant": self.variant, "intervened": self.intervened}

    def summary(self) -> dict[str, Any]:
        main, same = self.main, self.interventions["same_pairs"]
        return {
            "run_dir": self.run_dir,
            "encoding": self.encoding,
            "frequencies": self.frequencies,
            **self.variant_keys(),
            "corpus": self.corpus,
            "seed": self.seed,
            "documents": self.documents,
            "shuffled_documents": self.shuffled_documents,
            "U*": main.depth.value,
            "U*_at": main.well.location,
            "U*_ci": list(main.depth.interval),
            "shuffled_U*": main.shuffled_well.depth,
            "shuffle_change": main.shuffle_change.value,
            "shuffle_ci": list(main.shuffle_change.interval),
            "merge_change": same["merge"].value,
            "merge_ci": list(same["merge"].interval),
            "split_change": same["split"].value,
            "split_ci": list(same["split"].interval),
            "interventions": {
                reading: {
                    **{kind: estimate.value for kind, estimate in by_kind.items()},
                    **{f"{kind}_ci": list(estimate.interval) for kind, estimate in by_kind.items()},
                }
                for reading, by_kind in self.interventions.items()
            },
            "readings": {
                name: {
                    "U*": d.depth.value,
                    "U*_at": d.well.location,
                    "U*_ci": list(d.depth.interval),
                    "shuffle_change": d.shuffle_change.value,
                    "shuffle_ci": list(d.shuffle_change.interval),
                }
                for name, d in self.depths.items()
            },
            "residual": curve_list(main.well.residual),
            "shuffled_residual": curve_list(main.shuffled_well.residual),
            "shape": {
                "last": last_displacement(main.well.residual),
                **{name: estimate.value for name, estimate in self.well_shape.items()},
                **{f"{name}_ci": list(estimate.interval) for name, estimate in self.well_shape.items()},
            },
            "pairs": main.well.pairs.tolist(),
            "trend_coefficients": main.well.coefficients.tolist(),
        }

    def entry(self) -> dict[str, Any]:
        """The run's entry in the report's summary: ``summary()``, its run directory's facts, and the document
        replicates behind the intervals over seeds and documents (``poslab.analysis.hrope.intervals``): U* and ΔU*
        under the main reading (``U*``, ``shuffle_change``), under the other readings (``readings``), every
        intervention reading (``interventions``), the well's shape (``shape``: growth and recovery of the main
        reading's residual curve) and the bits/byte (``val_bpb``, where the run's results hold per-document losses),
        so that the report renders again from the summary alone and summaries of runs analysed apart merge into the
        report they would make together (``compute.merged_summary``). Entries written before some of them were kept
        lack those (their figures are then over seeds only)."""
        main = self.main
        others = {
            name: {"U*": saved_replicates(d.depth), "shuffle_change": saved_replicates(d.shuffle_change)}
            for name, d in self.depths.items()
            if name != "main"
        }
        interventions = {
            reading: {kind: saved_replicates(estimate) for kind, estimate in by_kind.items()}
            for reading, by_kind in self.interventions.items()
        }
        replicates = {
            "U*": saved_replicates(main.depth),
            "shuffle_change": saved_replicates(main.shuffle_change),
            "readings": others,
            "interventions": interventions,
        }
        if self.shape is not None:
            replicates["shape"] = {name: saved_replicates(estimate) for name, estimate in self.shape.items()}
        if len(self.facts.val_bpb_replicates):
            replicates["val_bpb"] = replicate_list(self.facts.val_bpb_replicates)
        return {**self.summary(), "run_files": self.facts.as_dict(), "replicates": replicates}

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> RunAnalysis:
        """A RunAnalysis back from its summary entry (``entry``, or ``summary``: an ``hrope_runs.json`` entry,
        whose facts and document replicates are then unknown), with the document replicates the entry keeps; an
        entry written before the readings existed gives the main reading and same-pairs interventions only."""
        readings = summary.get("readings") or {"main": summary}
        depths = {name: saved_depth(summary, name, r) for name, r in readings.items()}
        replicates = summary.get("replicates") or {}
        kept = {"main": replicates, **(replicates.get("readings") or {})}
        for name, depth in depths.items():  # entries written before they were kept: over seeds only
            for key, attribute in (("U*", "depth"), ("shuffle_change", "shuffle_change")):
                saved = (kept.get(name) or {}).get(key)
                if saved:
                    setattr(depth, attribute, with_replicates(getattr(depth, attribute), saved))
        saved = summary.get("interventions") or {
            "same_pairs": {k: summary[f"{k}_change"] for k in INTERVENTIONS}
            | {f"{k}_ci": summary[f"{k}_ci"] for k in INTERVENTIONS}
        }
        kept_interventions = replicates.get("interventions") or {}
        interventions = {
            reading: {
                kind: with_replicates(
                    saved_estimate(values[kind], values.get(f"{kind}_ci")),
                    (kept_interventions.get(reading) or {}).get(kind),
                )
                for kind in INTERVENTIONS
            }
            for reading, values in saved.items()
        }
        facts = RunFacts.from_dict(summary.get("run_files") or {})
        if replicates.get("val_bpb"):
            bpb = with_replicates(Estimate(facts.val_bpb, (math.nan, math.nan)), replicates["val_bpb"])
            facts = replace(facts, val_bpb_replicates=bpb.replicates)
        analysis = cls(
            run_dir=summary["run_dir"],
            encoding=summary["encoding"],
            corpus=summary["corpus"],
            seed=summary["seed"],
            documents=summary["documents"],
            shuffled_documents=summary.get("shuffled_documents", summary["documents"]),
            depths=depths,
            interventions=interventions,
            frequencies=summary.get("frequencies"),
            variant=summary.get("variant"),
            intervened=summary.get("intervened", "paragraph"),
            facts=facts,
        )
        kept_shape = replicates.get("shape") or {}
        if all(kept_shape.get(name) for name in SHAPE):  # else (written before): the values from the curve alone
            values, intervals = shape_without_replicates(analysis.well), summary.get("shape") or {}
            analysis.shape = {
                name: with_replicates(saved_estimate(values[name].value, intervals.get(f"{name}_ci")), kept_shape[name])
                for name in SHAPE
            }
        return analysis


def with_replicates(estimate: Estimate, saved: list[float | None] | None) -> Estimate:
    """``estimate`` with the document replicates of a summary entry (None: nan), or as it is without any."""
    if not saved:
        return estimate
    replicates = np.array([math.nan if v is None else v for v in saved], dtype=float)
    return Estimate(estimate.value, estimate.interval, replicates)


def saved_estimate(value: float | None, ci: Any) -> Estimate:
    return Estimate(math.nan if value is None else float(value), tuple(ci) if ci else (math.nan, math.nan))


def saved_well(summary: dict[str, Any], residual: list[float | None], depth: float, location: int,
               coefficients: Any = (0.0,)) -> Well:  # fmt: skip
    curve = np.array([math.nan if v is None else v for v in residual], dtype=float)
    return Well(curve, np.asarray(summary["pairs"]), depth, location, np.asarray(coefficients))


def saved_depth(summary: dict[str, Any], name: str, reading: dict[str, Any]) -> Depth:
    """Reading ``name``'s Depth from a summary entry: the main reading has its curves, the others U* alone."""
    main = name == "main"
    coefficients = summary.get("trend_coefficients", [0.0])
    return Depth(
        saved_well(summary, summary["residual"] if main else [0.0], reading["U*"], reading["U*_at"], coefficients),
        saved_well(summary, summary["shuffled_residual"] if main else [0.0], summary.get("shuffled_U*", math.nan), -1),
        saved_estimate(reading["U*"], reading.get("U*_ci")),
        saved_estimate(reading["shuffle_change"], reading.get("shuffle_ci")),
    )


def saved_replicates(estimate: Estimate) -> list[float | None]:
    """An estimate's document replicates for JSON, at 6 significant digits (far below their spread)."""
    return replicate_list(estimate.replicates)


def replicate_list(replicates: np.ndarray) -> list[float | None]:
    """Document replicates for JSON, at 6 significant digits (nan: None)."""
    return [None if not math.isfinite(v) else float(f"{v:.6g}") for v in replicates]


def curve_list(curve: np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in curve]
