"""Past one machine, on paper: busbw predicted from published link parameters.

Each link of ``config/links.yaml`` connects all N nodes on its own (one level: N GPUs on one
NVLink/NVSwitch fabric, or N hosts each with one NIC); α is the per-step latency, β the
inverse of the per-direction bandwidth, γ the reduction's memory traffic (3 bytes per byte
reduced) at the device's published memory bandwidth.  The published allreduce figures in the
same file are set beside the model's prediction for the same link, algorithm, N and size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..bench.cli import BenchInputError, parse_size
from ..bench.flags import format_bytes
from ..bench.results import busbw_factor
from .costs import ModelInputError, Params, check_point, predict_seconds
from .data import ADD_TRAFFIC

__all__ = [
    "PAPER_ALGORITHMS",
    "PAPER_NODES",
    "Link",
    "Published",
    "busbw_GBps",
    "default_links",
    "load_links",
    "paper_lines",
    "published_points",
]

PAPER_ALGORITHMS = ("ring", "hierarchical", "rabenseifner")
PAPER_NODES = tuple(1 << k for k in range(1, 11))  # 2 .. 1024


@dataclass(frozen=True)
class Link:
    key: str
    name: str
    bandwidth_GBps: float  # per direction
    params: Params
    source: str


def _positive(where: str, entry: dict, field: str) -> float:
    value = entry.get(field)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ModelInputError(f"{where}: {field} must be a number > 0, got {value!r}")
    return float(value)


def _link(key: str, entry: dict, devices: dict) -> Link:
    where = f"links.{key}"
    lanes = _positive(where, entry, "lanes")
    per_lane = (
        _positive(where, entry, "lane_GBps")
        if "lane_GBps" in entry
        else _positive(where, entry, "lane_Gbps") / 8
    )
    bandwidth = lanes * per_lane * _positive(where, entry, "encoding")
    device = devices.get(entry.get("device"))
    if not isinstance(device, dict):
        raise ModelInputError(f"{where}: device {entry.get('device')!r} is not under devices:")
    memory = _positive(f"devices.{entry['device']}", device, "memory_GBps")
    for field in ("source", "latency_source"):
        if not str(entry.get(field, "")).strip():
            raise ModelInputError(f"{where}: no {field} (every parameter cites where it is from)")
    params = Params(
        alpha=_positive(where, entry, "latency_us") * 1e-6,
        beta=1 / (bandwidth * 1e9),
        gamma=ADD_TRAFFIC / (memory * 1e9),
    )
    return Link(key, str(entry.get("name", key)), bandwidth, params, str(entry["source"]))


def load_links(path: str | Path) -> tuple[dict[str, Link], list[dict]]:
    """The links and the published figures of a links file, checked."""
    try:
        import yaml
    except ImportError:
        raise ModelInputError(
            "PyYAML is missing: pip install pyyaml (or the study extra: pip install -e .[study])"
        ) from None
    path = Path(path)
    if not path.is_file():
        raise ModelInputError(f"{path}: no such links file")
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    devices, links = document.get("devices") or {}, document.get("links") or {}
    if not links:
        raise ModelInputError(f"{path}: no links: section")
    checked = {key: _link(key, entry, devices) for key, entry in links.items()}
    published = list(document.get("published") or [])
    for i, entry in enumerate(published):
        if entry.get("link") not in checked:
            raise ModelInputError(f"published[{i}]: link {entry.get('link')!r} is not under links:")
        _positive(f"published[{i}]", entry, "busbw_GBps")
        if not str(entry.get("source", "")).strip():
            raise ModelInputError(f"published[{i}]: no source")
    return checked, published


def busbw_GBps(link: Link, algorithm: str, nodes: int, nbytes: int) -> float:
    """nccl-tests' busbw of one allreduce: (bytes / time) x 2(N-1)/N, decimal GB/s."""
    check_point(algorithm, nodes, nbytes)
    seconds = predict_seconds(link.params, algorithm, nodes, nbytes)
    return nbytes / seconds / 1e9 * busbw_factor(nodes) if seconds > 0 else 0.0


def _link_table(link: Link, nbytes: int) -> list[str]:
    a, g = link.params.alpha, link.params.gamma
    lines = [
        f"{link.name}: {link.bandwidth_GBps:.1f} GB/s per direction, alpha {a * 1e6:.1f} us, "
        f"gamma {g * 1e12:.2f} ps/B; busbw GB/s at {format_bytes(nbytes)}",
        f"  {'N':>5}" + "".join(f"  {name:>13}" for name in PAPER_ALGORITHMS),
    ]
    for nodes in PAPER_NODES:
        cells = "".join(
            f"  {busbw_GBps(link, name, nodes, nbytes):13.1f}" for name in PAPER_ALGORITHMS
        )
        lines.append(f"  {nodes:>5}{cells}")
    return lines


@dataclass(frozen=True)
class Published:
    """A published allreduce figure beside the model's prediction for the same point."""

    what: str
    link: Link
    algorithm: str
    nodes: int
    nbytes: int
    published_GBps: float
    model_GBps: float
    source: str
    why: str

    @property
    def error(self) -> float:
        """(model - published) / published."""
        return self.model_GBps / self.published_GBps - 1


def published_points(links: dict[str, Link], published: list[dict]) -> list[Published]:
    """Every published figure of the links file with the model's busbw for its point."""
    points = []
    for entry in published:
        try:
            nbytes = parse_size(str(entry["bytes"]))
        except (KeyError, BenchInputError) as exc:
            raise ModelInputError(f"published {entry.get('what')!r}: bytes: {exc}") from None
        link, algorithm = links[entry["link"]], str(entry.get("algorithm", "ring"))
        nodes = int(entry["nodes"])
        points.append(
            Published(
                what=str(entry["what"]),
                link=link,
                algorithm=algorithm,
                nodes=nodes,
                nbytes=nbytes,
                published_GBps=float(entry["busbw_GBps"]),
                model_GBps=busbw_GBps(link, algorithm, nodes, nbytes),
                source=" ".join(str(entry["source"]).split()),
                why=" ".join(str(entry.get("differs_because", "not stated")).split()),
            )
        )
    return points


def _published_lines(links: dict[str, Link], published: list[dict]) -> list[str]:
    lines = ["Published figures beside the model (same link, algorithm, N, size):"]
    for p in published_points(links, published):
        lines += [
            f"- {p.what} (N={p.nodes}, {format_bytes(p.nbytes)}): published "
            f"{p.published_GBps:.0f} GB/s, model ({p.algorithm}, {p.link.key}) "
            f"{p.model_GBps:.1f} GB/s, model error {p.error * 100:+.0f} %",
            f"    source: {p.source}",
            f"    why: {p.why}",
        ]
    return lines


def default_links() -> Path:
    """config/links.yaml of the working directory (a checkout, or a user's own), else the
    copy the package carries (in a checkout, a link to config/links.yaml)."""
    here = Path("config/links.yaml")
    return here if here.is_file() else Path(__file__).with_name("links.yaml")


def paper_lines(path: str | Path, nbytes: int) -> list[str]:
    """The per-link busbw tables and the published comparison, as text lines."""
    if nbytes <= 0:
        raise ModelInputError(f"size must be > 0 bytes for busbw, got {nbytes}")
    links, published = load_links(path)
    lines: list[str] = []
    for link in links.values():
        lines += [*_link_table(link, nbytes), ""]
    return lines + _published_lines(links, published)
