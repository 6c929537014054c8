"""scripts/install_nsys.sh enables non-free from the machine's own Debian mirror, read from
its apt sources (deb822 or one-line format), never from a host named in the script."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
SH = shutil.which("sh")

pytestmark = pytest.mark.skipif(SH is None, reason="no POSIX sh on PATH")

DEB822 = textwrap.dedent(
    """\
    Types: deb
    URIs: https://download.docker.com/linux/debian
    Suites: bookworm
    Components: stable

    Types: deb
    # the site's mirror
    URIs: http://mirror.example.org/debian
    Suites: bookworm bookworm-updates
    Components: main
    Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

    Types: deb
    URIs: http://mirror.example.org/debian-security
    Suites: bookworm-security
    Components: main
    """
)

ONE_LINE = textwrap.dedent(
    """\
    # deb http://deb.debian.org/debian bookworm main
    deb-src http://src.example.org/debian bookworm main
    deb http://mirror.example.org/debian-security bookworm-security main
    deb [arch=amd64 signed-by=/etc/apt/site.gpg] http://proxy:3142/debian bookworm main contrib
    """
)


def enable_non_free(apt_etc: Path, suite: str = "bookworm") -> subprocess.CompletedProcess:
    script = f'. "{SCRIPTS / "apt_mirror.sh"}" && enable_non_free "$1" "$2"'
    return subprocess.run(
        [SH, "-c", script, "sh", str(apt_etc), suite], capture_output=True, text=True, timeout=30
    )


def test_deb822_sources_give_the_mirror_and_keyring(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    done = enable_non_free(tmp_path)
    assert done.returncode == 0, done.stderr
    written = tmp_path / "sources.list.d" / "debian-non-free.sources"
    assert done.stdout.strip() == str(written)
    assert written.read_text() == (
        "Types: deb\n"
        "URIs: http://mirror.example.org/debian\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        "Suites: bookworm\n"
        "Components: contrib non-free\n"
    )


def test_one_line_sources_list_gives_the_mirror_and_options(tmp_path):
    (tmp_path / "sources.list").write_text(ONE_LINE)
    done = enable_non_free(tmp_path)
    assert done.returncode == 0, done.stderr
    written = tmp_path / "sources.list.d" / "debian-non-free.list"
    assert written.read_text() == (
        "deb [arch=amd64 signed-by=/etc/apt/site.gpg] "
        "http://proxy:3142/debian bookworm contrib non-free\n"
    )


def test_an_existing_source_is_left_alone(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    existing = tmp_path / "sources.list.d" / "debian-non-free.sources"
    existing.write_text("kept\n")
    assert enable_non_free(tmp_path).returncode == 0
    assert existing.read_text() == "kept\n"


def test_no_mirror_for_the_release_is_one_clear_error(tmp_path):
    (tmp_path / "sources.list").write_text(ONE_LINE)
    done = enable_non_free(tmp_path, "trixie")
    assert done.returncode != 0
    assert done.stderr.startswith("no Debian mirror for trixie")
    assert not (tmp_path / "sources.list.d").exists() or not any(
        (tmp_path / "sources.list.d").iterdir()
    )


def test_install_script_names_no_mirror_host():
    script = (SCRIPTS / "install_nsys.sh").read_text()
    assert "deb.debian.org" not in script
    assert 'enable_non_free "$apt_etc"' in script
