"""The non-editable install: pyproject.toml lists every package, the wheel carries every kernel and
runtime source, and the installed wheel runs FlashDecode, rotary_kv_append and the combine.

An editable install (what `make` does) finds everything in the source tree whatever pyproject.toml
says; only a built wheel shows a package or a data folder left out of the configuration.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

try:
    import tomllib
except ModuleNotFoundError:  # python 3.10
    tomllib = pytest.importorskip("tomli")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _packages_in_tree() -> set[str]:
    """Every folder of ttdecode/ with an ``__init__.py``, and kernels/ as ttdecode.kernels."""
    found = {"ttdecode.kernels"}
    for init in (ROOT / "ttdecode").rglob("__init__.py"):
        found.add(".".join(init.parent.relative_to(ROOT).parts))
    return found


def _data_files_in_tree() -> set[str]:
    """The files the wheel must carry besides the packages' modules, as wheel paths (kernels/ ->
    ttdecode/kernels/): kernel and runtime sources, data, scripts in folders that are no package;
    documents (*.md) stay in the repository."""
    files = set()
    for top, prefix in ((ROOT / "ttdecode", ("ttdecode",)), (ROOT / "kernels", ("ttdecode", "kernels"))):
        for f in top.rglob("*"):
            rel = f.relative_to(top)
            if (not f.is_file() or "__pycache__" in rel.parts or f.suffix in (".pyc", ".md")
                    or any(p.startswith(".") for p in rel.parts)):
                continue
            if f.suffix == ".py" and (f.parent / "__init__.py").is_file():
                continue  # a module
            files.add("/".join(prefix + rel.parts))
    return files


def test_pyproject_lists_every_package_of_the_tree() -> None:
    """A new folder under ttdecode/ cannot be forgotten: the wheel would install without it."""
    listed = _pyproject()["tool"]["setuptools"]["packages"]
    assert len(listed) == len(set(listed)), f"duplicates in pyproject.toml's packages: {listed}"
    in_tree = _packages_in_tree()
    assert set(listed) == in_tree, (
        f"pyproject.toml [tool.setuptools] packages differs from the tree: missing {sorted(in_tree - set(listed))}, "
        f"not in the tree {sorted(set(listed) - in_tree)}")


def _build_wheel(tmp: Path) -> Path:
    """Build the wheel from a copy of the sources (so no build/ or egg-info lands in the tree);
    without build isolation when this interpreter's setuptools is recent enough (no index needed)."""
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("ttdecode", "kernels"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp / "dist"), str(src)]
    try:
        import setuptools

        if int(setuptools.__version__.split(".")[0]) >= 77:
            cmd.insert(4, "--no-build-isolation")
    except ImportError:
        pass
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    assert run.returncode == 0, f"pip wheel failed:\n{run.stdout}\n{run.stderr}"
    wheels = list((tmp / "dist").glob("ttdecode-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


SMOKE = textwrap.dedent('''
    import sys
    from pathlib import Path

    import torch

    import ttdecode
    from ttdecode.ops.combine.op import run_combine
    from ttdecode.reference import sdpa_decode_reference

    assert Path(ttdecode.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), ttdecode.__file__
    from ttdecode.core.paths import kernels_dir
    assert kernels_dir().resolve().is_relative_to(Path(sys.argv[1]).resolve()), kernels_dir()

    g = torch.Generator().manual_seed(0)
    bf = lambda x: x.bfloat16().double()
    # FlashDecode on the host runtime (the kernels of ttdecode/kernels/flash_decode/)
    q, k, v = torch.randn(1, 1, 8, 64, generator=g), torch.randn(1, 1, 64, 64, generator=g), torch.randn(1, 1, 64, 64, generator=g)
    out = ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=[40], backend="host")
    assert ttdecode.last_backend() == "host"
    err = (out.double() - sdpa_decode_reference(bf(q), bf(k), bf(v), cur_pos=[40])).abs().max().item()
    assert err < 0.05, err
    # rotary_kv_append (kernels/rotary_append/): cos 1, sin 0 writes the new rows unrotated
    kc, vc = (ttdecode.from_torch(torch.zeros(1, 1, 64, 64), dtype=ttdecode.bfloat16) for _ in range(2))
    kn, vn = torch.randn(1, 1, 1, 64, generator=g), torch.randn(1, 1, 1, 64, generator=g)
    kc, vc = ttdecode.rotary_kv_append(kn, vn, kc, vc, cur_pos=[5], cos=torch.ones(1, 64), sin=torch.zeros(1, 64),
                                       backend="host")
    assert torch.equal(ttdecode.to_torch(kc)[0, 0, 5].float(), kn[0, 0, 0].bfloat16().float())
    assert torch.equal(ttdecode.to_torch(vc)[0, 0, 5].float(), vn[0, 0, 0].bfloat16().float())
    # the combine (kernels/combine/)
    outs, lses = torch.randn(2, 1, 8, 64, generator=g), torch.randn(2, 1, 8, generator=g)
    o, lse = run_combine(outs, lses)
    w = torch.softmax(lses.double(), 0)[..., None]
    assert (o.double() - (w * bf(outs)).sum(0, keepdim=True)).abs().max().item() < 1e-2
    assert (lse.double() - torch.logsumexp(lses.double(), 0, keepdim=True)).abs().max().item() < 1e-3
    print("wheel ok")
''')


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_three_operators(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_data_files_in_tree() - names)
    assert not missing, f"the wheel lacks {len(missing)} data files (package-data globs?): {missing[:10]}"

    # A fresh venv with only the wheel; torch, numpy and ttnn come from this interpreter's
    # site-packages through a .pth file, which puts them *after* the venv's own site-packages (and
    # does not run that directory's .pth files, so an editable install there stays inactive).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    vpy = venv / "bin" / "python"
    run = subprocess.run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "--quiet", "--no-deps",
                          "--no-index", str(wheel)], capture_output=True, text=True)
    assert run.returncode == 0, f"pip install failed:\n{run.stdout}\n{run.stderr}"
    site = subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "zz_outer_site_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    cwd = tmp_path / "elsewhere"  # not the repository: `import ttdecode` must not find the source tree
    cwd.mkdir()
    (cwd / "smoke.py").write_text(SMOKE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    run = subprocess.run([str(vpy), "smoke.py", str(venv)], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0 and "wheel ok" in run.stdout, f"{run.stdout}\n{run.stderr}"
