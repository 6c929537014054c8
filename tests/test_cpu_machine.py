"""The cache probe (ring.machine) on fake sysfs trees, and ring-segmented's default block
derived from it."""

from __future__ import annotations

import pytest

from ring import machine
from ring.schedule import plans


def _cache(root, entries):
    for i, (level, kind, size) in enumerate(entries):
        index = root / f"index{i}"
        index.mkdir(parents=True)
        (index / "level").write_text(f"{level}\n")
        (index / "type").write_text(f"{kind}\n")
        (index / "size").write_text(f"{size}\n")
    return root


EPYC = [
    (1, "Data", "32K"),
    (1, "Instruction", "32K"),
    (2, "Unified", "512K"),
    (3, "Unified", "32768K"),
]


def test_the_probe_reads_data_and_unified_levels_in_bytes(tmp_path):
    root = _cache(tmp_path / "cache", EPYC)
    assert machine.read_cache_sizes(root) == {1: 32 << 10, 2: 512 << 10, 3: 32 << 20}
    assert machine.probe_cache_bytes(root) == (512 << 10, 32 << 20)


def test_units_and_a_missing_level_three(tmp_path, monkeypatch):
    monkeypatch.setattr(machine.os, "sysconf_names", {})
    root = _cache(tmp_path / "c", [(1, "Data", "48K"), (2, "Unified", "2M"), (3, "Unified", "1G")])
    assert machine.probe_cache_bytes(root) == (2 << 20, 1 << 30)
    root = _cache(tmp_path / "d", [(1, "Data", "48K"), (2, "Unified", "1280K")])
    assert machine.probe_cache_bytes(root) == (1280 << 10, 1280 << 10)


def test_unreadable_entries_are_skipped_and_nothing_gives_the_stated_defaults(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(machine.os, "sysconf_names", {})
    root = _cache(tmp_path / "cache", [(2, "Unified", "lots"), (3, "Unified", "8M")])
    (root / "index2").mkdir()  # no files in it
    (root / "index3").mkdir()
    (root / "index3" / "level").write_text("three\n")
    assert machine.read_cache_sizes(root) == {3: 8 << 20}
    assert machine.probe_cache_bytes(tmp_path / "absent") == (
        machine.DEFAULT_L2_BYTES,
        machine.DEFAULT_LAST_LEVEL_BYTES,
    )


def test_sysconf_fills_what_sysfs_lacks(tmp_path, monkeypatch):
    values = {"SC_LEVEL2_CACHE_SIZE": 1 << 21, "SC_LEVEL3_CACHE_SIZE": 0}
    monkeypatch.setattr(machine.os, "sysconf_names", values)
    monkeypatch.setattr(machine.os, "sysconf", values.__getitem__)
    assert machine.probe_cache_bytes(tmp_path / "absent") == (1 << 21, 1 << 21)


@pytest.mark.parametrize(
    ("nodes", "expected"), [(1, 8 << 20), (2, 4 << 20), (4, 2 << 20), (64, 512 << 10)]
)
def test_the_default_block_follows_the_probed_caches(monkeypatch, nodes, expected):
    monkeypatch.setattr(plans, "cache_bytes", lambda: (512 << 10, 32 << 20))
    assert plans.default_segment_bytes(nodes) == expected


def test_the_harness_records_the_probed_caches(monkeypatch):
    from ring.bench import environment

    monkeypatch.setattr(environment, "cache_bytes", lambda: (3 << 20, 96 << 20))
    recorded = environment.collect_environment()["cache_bytes"]
    assert recorded == {"l2": 3 << 20, "last_level": 96 << 20}


MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
tmpfs /mnt/huge tmpfs rw,relatime,size=4194304k,huge=always 0 0
tmpfs /mnt/huge/inner tmpfs rw,huge=within_size 0 0
tmpfs /mnt/with\\040space tmpfs rw,huge=advise 0 0
tmpfs /mnt/stacked tmpfs rw 0 0
tmpfs /mnt/stacked tmpfs rw,huge=within_size 0 0
"""


@pytest.mark.parametrize(
    ("directory", "huge"),
    [
        ("/dev/shm", "never"),  # a tmpfs that names no huge= option
        ("/dev/shm/sub", "never"),
        ("/mnt/huge", "always"),
        ("/mnt/huge/dir", "always"),
        ("/mnt/huge/inner/x", "within_size"),  # the innermost mount holds it
        ("/mnt/hugex", None),  # a sibling's name, on the root file system
        ("/mnt/with space/y", "advise"),
        ("/home", None),  # not a tmpfs
        ("/mnt/stacked/z", "within_size"),  # the last of two mounts on one point
    ],
)
def test_mount_huge_reads_the_innermost_mount(directory, huge):
    assert machine.mount_huge(directory, MOUNTS) == huge


def test_huge_pages_reads_the_chosen_words(tmp_path):
    (tmp_path / "enabled").write_text("always [madvise] never\n")
    (tmp_path / "shmem_enabled").write_text("always within_size advise [never] deny force\n")
    pages = machine.huge_pages(None, tmp_path)
    assert pages == {
        "private": "madvise",
        "shared": "never",
        "directory": None,
        "on_directory": None,
    }
    assert machine.huge_pages(None, tmp_path / "absent")["private"] is None
