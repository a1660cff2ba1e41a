"""The README's Python examples run as written, in order, in one namespace."""

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write files
    blocks = [part.split("```", 1)[0] for part in README.read_text().split("```python\n")[1:]]
    assert len(blocks) >= 2
    namespace: dict = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["cost"] > 0 and namespace["timeline"].makespan > 0
    assert namespace["result"].best_cost <= namespace["result"].initial_cost
    assert (tmp_path / "lenet.ffsearch").exists()
