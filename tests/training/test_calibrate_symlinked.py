"""Issue 21: `failfast calibrate --data` on a data set assembled from symbolic links
(`ln -s /data/runs/* .`, with the label file beside the links) finds and scores its runs."""

from __future__ import annotations

import json

import pytest

from tests.monitor.test_layouts_issue21 import _linked_data_set


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    from tests.bundle_helpers import shared_bundle

    return shared_bundle(tiny_model_dir, tmp_path_factory)


def test_calibrate_on_a_folder_of_links(bundle, tmp_path, capsys) -> None:
    from training.cli import main

    _, ds = _linked_data_set(tmp_path, 40)
    out = tmp_path / "b2"
    argv = ["calibrate", "--bundle", str(bundle), "--data", str(ds), "--out", str(out)]
    argv += ["--method", "conformal", "--no-progress"]
    assert main(argv) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    assert "read 40 runs: 40 labelled" in printed
    rec = json.loads((out / "monitor.json").read_text())["calibration"]
    assert rec["groups"]["mini-swe-agent"] == {"runs": 40, "resolved": 20, "refused": False}
