"""The browser's building blocks, under CPython: the in-process runner, the site's contents,
the pinned assets and the server's headers. The page itself is tested in tests/e2e/."""

import html
import json
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
import zipfile

import pytest

from grader import assets, cli, serve, site, webruntime
from grader.collect import OUTPUT_LIMIT
from grader.problems import KIT_ROOT, all_problems
from grader.serve import serve_in_thread
from grader.webrun import run_problem

BROWSER_PROBLEMS = [p for p in all_problems() if p.runs_in_browser]
FIRST = BROWSER_PROBLEMS[0]


@pytest.fixture
def kit(browser_kit):
    return browser_kit


def test_browser_files_hold_no_answers():
    for problem in BROWSER_PROBLEMS:
        files = site.kit_files(problem)
        assert f"problems/{problem.slug}/test_{problem.slug}.py" in files
        assert not any(path.startswith("reference/") or ".meta" in path for path in files)


def test_learner_sees_their_frames_their_output_and_the_message(kit):
    learner = kit / "problems" / FIRST.slug / f"{FIRST.slug}.py"
    name = FIRST.implement[0]
    learner.write_text(
        f"def {name}(*args, **kwargs):\n    print('hi')\n    return helper()\n\n"
        "def helper():\n    return 1 / 0\n"
    )
    report = run_problem(str(kit), FIRST.slug, ["starter"], str(learner))
    assert report["exit_code"] == 1 and not report["errors"]
    first = report["tests"][0]
    assert first["outcome"] == "failed"
    assert first["message"] == "ZeroDivisionError: division by zero"
    assert first["stdout_cut"] == 0
    assert first["traceback"] == [
        {"line": 3, "function": name, "code": "return helper()"},
        {"line": 6, "function": "helper", "code": "return 1 / 0"},
    ]
    assert first["stdout"] == "hi\n"


def test_printed_output_is_capped_and_says_how_much_was_cut(kit):
    learner = kit / "problems" / FIRST.slug / f"{FIRST.slug}.py"
    learner.write_text(
        f"def {FIRST.implement[0]}(*args, **kwargs):\n"
        "    print('x' * 50_000)\n    print('y' * 10)\n    raise KeyError\n"
    )
    report = run_problem(str(kit), FIRST.slug, ["starter"], str(learner))
    first = report["tests"][0]
    assert first["stdout"] == "x" * OUTPUT_LIMIT  # the start of the output, as printed
    assert first["stdout_cut"] == 50_000 + 1 + 10 + 1 - OUTPUT_LIMIT  # with the newlines


def test_an_edit_is_seen_by_the_next_run_in_the_same_interpreter(kit, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as the worker sets it
    learner = kit / "problems" / FIRST.slug / f"{FIRST.slug}.py"
    learner.write_text(FIRST.reference.read_text())
    passing = run_problem(str(kit), FIRST.slug, ["starter"], str(learner))
    assert {t["outcome"] for t in passing["tests"]} == {"passed"}
    for version in ("v1", "v2"):  # same size, same second: no stale bytecode nor source lines
        learner.write_text(
            f"def {FIRST.implement[0]}(*args, **kwargs):\n    raise KeyError('{version}')\n"
        )
        failing = run_problem(str(kit), FIRST.slug, ["starter"], str(learner))
        assert {t["outcome"] for t in failing["tests"]} == {"failed"}
        shown = (f"KeyError: '{version}'", f"KeyError('{version}')")  # raised, or observed
        assert all(any(s in t["message"] for s in shown) for t in failing["tests"])
        assert failing["tests"][0]["traceback"][0]["code"] == f"raise KeyError('{version}')"
    assert len(failing["tests"]) == len(passing["tests"])


def test_a_syntax_error_fails_every_test_with_its_line(kit):
    learner = kit / "problems" / FIRST.slug / f"{FIRST.slug}.py"
    learner.write_text("def broken(:\n")
    report = run_problem(str(kit), FIRST.slug, ["starter"], str(learner))
    assert report["tests"] and {t["outcome"] for t in report["tests"]} == {"failed"}
    assert "syntax error on line 1" in report["tests"][0]["message"]


def test_lock_file_lists_exactly_the_pinned_wheels():
    lock = assets.lock_file()
    assert lock["info"]["version"] == assets.PYODIDE_VERSION
    assert set(lock["packages"]) == {w.name for w in assets.WHEELS}
    pytest_entry = lock["packages"]["pytest"]
    assert pytest_entry["file_name"] == "pytest-9.2.0-py3-none-any.whl"
    assert set(pytest_entry["depends"]) <= set(lock["packages"])


def test_a_corrupted_download_is_rejected_and_removed(tmp_path):
    bad = tmp_path / "pytest.whl"
    bad.write_bytes(b"not the pinned wheel")
    with pytest.raises(assets.AssetError, match="sha256"):
        assets._verify(bad, assets.WHEELS[1].sha256)
    assert not bad.exists()


def test_a_second_setup_downloads_nothing(monkeypatch):
    assets.ensure_assets()  # the first setup (downloads only if this machine has no cache)

    def no_network(command, cwd):
        raise AssertionError(f"downloaded again: {command}")

    monkeypatch.setattr(assets, "_run", no_network)
    runtime = assets.ensure_assets()
    for name, sha in assets.CORE_FILES.items():
        assert assets.sha256_of(runtime / name) == sha


def test_the_runtime_lock_matches_its_files_and_pytest_comes_precompiled():
    runtime = assets.ensure_assets()
    lock = json.loads((runtime / assets.LOCK_NAME).read_text())
    for entry in lock["packages"].values():
        assert assets.sha256_of(runtime / entry["file_name"]) == entry["sha256"]
    with zipfile.ZipFile(runtime / lock["packages"]["pytest"]["file_name"]) as wheel:
        names = wheel.namelist()
    assert "_pytest/__pycache__/main.cpython-312.pyc" in names
    assert "_pytest/main.py" in names  # sources stay, for tracebacks


def test_the_image_leaves_out_what_the_page_never_imports():
    """Tests of the packages and the pygments lexers pytest never uses (a third of the image)
    stay out; everything the runner imports stays in, sources and precompiled files alike."""
    kept = ["numpy/__init__.py", "numpy/_core/_multiarray_umath.cpython-312-wasm32-emscripten.so",
            "numpy/testing/__init__.py", "_pytest/main.py", "pygments/lexers/python.py",
            "pygments/lexers/__pycache__/python.cpython-312.pyc", "pygments/lexers/_mapping.py",
            "pygments/formatters/terminal.py", "pygments/styles/__init__.py", "pygments/token.py",
            "pygments/lexers/diff.py"]  # fmt: skip
    dropped = ["numpy/_core/tests/test_numeric.py", "numpy/__init__.pyi", "pygments/lexers/lisp.py",
               "pygments/lexers/__pycache__/lisp.cpython-312.pyc", "pygments/formatters/html.py",
               "pygments/styles/monokai.py", "numpy/"]  # fmt: skip
    assert [name for name in kept if not webruntime.in_image(name)] == []
    assert [name for name in dropped if webruntime.in_image(name)] == []


def test_the_server_isolates_the_page_and_serves_wasm(tmp_path):
    (tmp_path / "index.html").write_text("<!doctype html><p>hi</p>")
    (tmp_path / "a.wasm").write_bytes(b"\0asm")
    server, url = serve_in_thread(tmp_path)
    try:
        with urllib.request.urlopen(url) as response:
            assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin"
            assert response.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
        with urllib.request.urlopen(url + "a.wasm") as response:
            assert response.headers["Content-Type"] == "application/wasm"
    finally:
        server.shutdown()
    assert url.startswith("http://127.0.0.1:")


@pytest.mark.skipif(shutil.which("node") is None, reason="building the site needs Node.js")
def test_built_site_has_a_page_per_problem_and_no_answers():
    out = site.ensure_site()
    assert not site.is_stale(out)
    listing = (out / "index.html").read_text(encoding="utf-8")
    for problem in all_problems():
        page = (out / "p" / problem.slug / "index.html").read_text(encoding="utf-8")
        assert problem.title.replace("&", "&#38;") in page and problem.slug in listing
        if problem.runs_in_browser:
            assert 'data-testid="run"' in page
            kit_json = json.loads((out / "p" / problem.slug / "kit.json").read_text())
            assert kit_json == site.kit_files(problem)
        else:
            assert f"pytest problems/{problem.slug}" in page
    assert '<span class="katex">' in (out / "p" / FIRST.slug / "index.html").read_text()
    shipped = {p.name for p in out.rglob("*")}
    reference_names = {p.name for p in (KIT_ROOT / "reference").glob("*.py")} - {"__init__.py"}
    assert not shipped & (reference_names | {"mistakes.toml", "mistakes.py"})


needs_node = pytest.mark.skipif(
    shutil.which("node") is None, reason="building the site needs Node.js"
)


@needs_node
def test_pages_list_their_hidden_tests_and_hints_before_any_run():
    out = site.ensure_site()
    collected = site.collect_tests(all_problems())
    for problem in all_problems():
        page = (out / "p" / problem.slug / "index.html").read_text(encoding="utf-8")
        items = re.findall(r'data-testid="result" data-status="notrun" data-id="([^"]+)"', page)
        assert [html.unescape(item) for item in items] == [t["id"] for t in collected[problem.slug]]
        assert len(items) >= 5, problem.slug
        data = json.loads(re.search(r'id="problem-data">(.*?)</script>', page, re.S)[1])
        assert len(data["hints"]) == len(problem.hints) >= 2, problem.slug
        assert 'id="problem-statement"' in page  # sections can be linked to
    points = {t["title"]: t["points"] for t in collected[FIRST.slug]}
    clip = "The clip counts only where it lowers the objective"
    assert sum(v for k, v in points.items() if k.startswith(clip)) == pytest.approx(3)


@needs_node
def test_assets_have_hashed_names_and_come_precompressed():
    out = site.ensure_site()
    page = (out / "p" / FIRST.slug / "index.html").read_text(encoding="utf-8")
    urls = re.findall(r'(?:src|href)="(/(?:assets|katex)[^"]+)"', page)
    worker = re.search(r'new Worker\("(/assets/[^"]+)"', page)[1]
    for url in [*urls, worker]:
        assert serve.HASHED.search(url), url
        if url.endswith((".js", ".css")):
            assert (out / f"{url[1:]}.br").is_file() and (out / f"{url[1:]}.gz").is_file(), url
    (runtime,) = out.glob("pyodide-*")
    assert serve.HASHED.search(f"/{runtime.name}/snapshot.bin")
    for name in ("snapshot.bin", "site-packages.bin", "pyodide.asm.wasm"):
        assert (runtime / f"{name}.br").stat().st_size < (runtime / name).stat().st_size / 2


@needs_node
def test_build_twice_the_second_says_up_to_date_and_does_not_rebuild(monkeypatch, capsys):
    assert cli.main(["build"]) == 0  # builds only if something changed
    capsys.readouterr()

    def rebuild(*args, **kwargs):
        raise AssertionError("rebuilt a site that was up to date")

    monkeypatch.setattr(site, "build_site", rebuild)
    assert cli.main(["build"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_build_errors_go_to_stderr(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise site.BuildError("npm ci failed (exit 1): see the output above")

    monkeypatch.setattr(site, "build_site", broken)
    assert cli.main(["build", "--force"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: npm ci failed (exit 1): see the output above\n"
    assert captured.out == ""


@needs_node
def test_serve_prints_its_url_and_serves_the_site_cross_origin_isolated():
    site.ensure_site()
    command = [sys.executable, "-m", "grader.cli", "serve", "--no-build", "--port", "0"]
    server = subprocess.Popen(command, cwd=KIT_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, f"no URL in {line!r}"
        with urllib.request.urlopen(f"{url[0]}p/{FIRST.slug}/", timeout=30) as response:
            assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin"
            assert response.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
            assert 'data-testid="run"' in response.read().decode()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_serve_on_a_port_in_use_says_what_to_do(tmp_path, monkeypatch, capsys):
    (tmp_path / "index.html").write_text("<!doctype html>")
    monkeypatch.setattr(site, "DIST_DIR", tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["serve", "--no-build", "--port", str(port)]) == 1
    error = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in error
    assert f"grpo-kit serve --port {port + 1}" in error
