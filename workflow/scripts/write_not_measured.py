"""Write what this machine could not measure (decided when the DAG was built) as JSON.

Each entry is a :class:`ring.study.LeftOut` record: ``what`` (the results), ``why`` (the
missing piece, as found), ``where`` (what to get first), ``target`` (the workflow target
that produces them) and ``how`` (the two in one sentence, for a person reading the file; the
report reads the fields).  An empty list means nothing was left out.
Run by Snakemake (rule not_measured), which provides the ``snakemake`` object.
"""

import json
from pathlib import Path


def write(entries: list[dict], out: Path, log: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    lines = [f"{len(entries)} result group(s) not measured on this machine"]
    lines += [f"- {entry['what']}: {entry['why']}" for entry in entries]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")


write(
    list(snakemake.params.entries),  # noqa: F821 (provided by Snakemake)
    Path(snakemake.output[0]),  # noqa: F821
    Path(snakemake.log[0]),  # noqa: F821
)
