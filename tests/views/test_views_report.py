"""`hpq report` without a browser: what the page holds, what it refuses, what it will not overwrite.

The inputs are real results (tests/report_samples.py: AWS's published p5 table and seed 004's g5 excerpt
judged by hpq's judges, run-nccl-test --sweep over the stand-in fabric, a real H200 run-nanogpt result), each
beside its broken twin. The page is parsed back with the standard library's HTML parser: a check reads the
element a browser would draw (``g.ref.expected``, ``g.slow-node``...), never the text the renderer was given.
The DOM Chromium builds from the same page is checked in tests/views/test_views_browser.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpq.scripts import nanogpt
from hpq.views import load, output, page
from tests import report_samples


class Dom(HTMLParser):
    """Start tags with their attributes, and the text inside each element (by tag and class)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.texts: list[tuple[tuple[tuple[str, dict[str, str]], ...], str]] = []
        self.feed(html)

    VOID = {"meta", "br", "img", "hr", "input", "link"}
    SVG_VOID = {"line", "rect", "circle", "polyline", "path"}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if tag not in self.VOID:
            self.stack.append((tag, a))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.texts.append((tuple(self.stack), data))

    def find(self, tag: str, cls: str | None = None) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and (cls is None or cls in a.get("class", "").split())]

    def text_in(self, tag: str, cls: str) -> list[str]:
        """The text pieces inside any ``tag`` element of class ``cls``."""
        return [t for s, t in self.texts if any(x[0] == tag and cls in x[1].get("class", "").split() for x in s)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("sweep")
    healthy = tmp_path_factory.mktemp("sweep-healthy")
    return {"p5": report_samples.nccl_p5(), "g5": report_samples.nccl_g5(), "nanogpt": report_samples.nanogpt(),
            "sweep": report_samples.sweep(tmp, report_samples.p5_speeds(4, slow=2)),
            "sweep_healthy": report_samples.sweep(healthy, report_samples.p5_speeds(4, slow=None))}


def items(*docs: dict) -> list[load.Item]:
    return [it for n, d in enumerate(docs) for it in load.from_doc(f"r{n}.json", copy.deepcopy(d))]


def hpq(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpq", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


# ----------------------------------------------------------------------------- the verdict lines


def test_headline_parts_from_real_messages(results):
    p5 = items(results["p5"])[0].headline
    assert (p5.outcome, p5.number) == ("PASS", "487.26 GB/s peak busbw at 16 GB on 2 nodes")
    assert p5.expectation == "487.09 GB/s published for 2 x ml.p5.48xlarge"
    assert p5.reason == "100% of the figure, EFA confirmed"
    sweep = items(results["sweep"])[0].headline  # its message starts with the node table: the verdict line wins
    assert sweep.outcome == "FAIL" and sweep.number.startswith("1 slow node(s): ip-10-1-0-12 (95.00 GB/s)")
    assert sweep.expectation.startswith("the cluster median") and "Drain" in sweep.reason
    healthy = items(results["sweep_healthy"])[0].headline
    assert healthy.outcome == "PASS" and healthy.number.startswith("no slow node among 4")
    assert load.split_headline("something else entirely", "FAIL") == load.Headline("FAIL", "", "",
                                                                                    "something else entirely")


def test_every_result_has_its_verdict_line(results):
    html = page.render(items(results["p5"], results["sweep"], results["nanogpt"]))
    dom = Dom(html)
    rows = dom.find("tr", "verdict")
    assert [r["data-test"] for r in rows] == ["nccl", "sweep", "nanogpt"]
    assert [r["class"].split()[1] for r in rows] == ["PASS", "FAIL", "PASS"]
    assert "487.09 GB/s published for 2 x ml.p5.48xlarge" in dom.text_in("td", "expectation")
    overall = [t for s, t in dom.texts if any("overall" in x[1].get("class", "") for x in s)]
    assert "FAIL" in overall, "one FAIL makes the overall FAIL"
    assert "Cluster: " in html and "ml-team-p5" in dom.text_in("span", "cluster")


# ----------------------------------------------------------------------------- bandwidth chart


def test_bandwidth_chart_draws_every_row_and_the_expected_figure(results):
    doc = results["p5"]
    dom = Dom(page.render(items(doc)))
    series = dom.find("g", "series")
    assert series and int(series[0]["data-points"]) == len(doc["rows"]) == 32  # the published table's 32 sizes
    assert len(dom.find("circle", "point")) == 32
    expected = dom.find("g", "expected")
    assert [float(e["data-value"]) for e in expected] == [487.09]
    assert [round(float(e["data-value"]), 3) for e in dom.find("g", "threshold")] == [round(487.09 * 0.7, 3)]
    assert "Message size (bytes, log scale)" in dom.text_in("text", "axis-label")
    assert "Bus bandwidth (GB/s)" in dom.text_in("text", "axis-label")
    assert {"1 KiB", "1 MiB", "1 GiB"} <= set(dom.text_in("text", "tick")), "the log-x axis spans 8 B to 16 GiB"


def test_an_eks_results_hosts_show_the_nodes_their_pods_ran_on(results):
    """On EKS the rank lines print pod names; the result's ``host_nodes`` (each pod's spec.nodeName) puts the node
    beside each. Twin: without the map, or for a host it does not name, the host stands alone."""
    doc = copy.deepcopy(results["g5"])
    doc["ranks"], doc["rank_hosts"] = 2, ["hpq-nccl-test-worker-0", "hpq-nccl-test-worker-1"]
    doc["host_nodes"] = {"hpq-nccl-test-worker-0": "ip-10-1-0-11", "hpq-nccl-test-launcher": "ip-10-1-0-12"}
    line = next(t for _, t in Dom(page.render(items(doc))).texts if t.startswith("2 on "))
    assert line == "2 on hpq-nccl-test-worker-0 (node ip-10-1-0-11), hpq-nccl-test-worker-1", line
    del doc["host_nodes"]
    line = next(t for _, t in Dom(page.render(items(doc))).texts if t.startswith("2 on "))
    assert line == "2 on hpq-nccl-test-worker-0, hpq-nccl-test-worker-1"


def test_bandwidth_without_a_figure_draws_no_expected_line(results):
    twin = copy.deepcopy(results["p5"])
    twin["verdict"].update(expected_busbw_gbps=None, pass_fraction=None)
    dom = Dom(page.render(items(twin)))
    assert dom.find("g", "expected") == [] and dom.find("p", "no-expectation")
    assert int(dom.find("g", "series")[0]["data-points"]) == 32


def test_non_finite_and_bogus_rows_are_left_out_of_the_chart(results):
    twin = copy.deepcopy(results["p5"])
    twin["rows"][0]["out_of_place"]["busbw_gbps"] = "1e9"  # a string is no number
    twin["rows"][0]["in_place"]["busbw_gbps"] = True
    twin["rows"][1]["size_bytes"] = -8  # not on a log axis
    dom = Dom(page.render(items(twin)))
    assert int(dom.find("g", "series")[0]["data-points"]) == 30


# ----------------------------------------------------------------------------- sweep heat map


def test_sweep_heat_map_marks_the_slow_node(results):
    dom = Dom(page.render(items(results["sweep"])))
    heat = dom.find("svg", "heatmap")
    assert [h["data-nodes"] for h in heat] == ["4"]
    cells = [c for c in dom.find("rect", "cell") if "data-a" in c]
    assert len(cells) == 4 * 3, "every ordered pair of different nodes is a cell"
    slow_cells = [c for c in cells if "ip-10-1-0-12" in (c["data-a"], c["data-b"])]
    assert {float(c["data-value"]) for c in slow_cells} == {95.0}
    assert [g["data-node"] for g in dom.find("g", "slow-node")] == ["ip-10-1-0-12"]
    marked = [a["data-node"] for a in dom.find("text", "slow")]
    assert marked == ["ip-10-1-0-12", "ip-10-1-0-12"], "row and column label"
    assert any("\u25b2 SLOW" in t for t in dom.text_in("text", "slow"))


def test_healthy_sweep_marks_no_node(results):
    dom = Dom(page.render(items(results["sweep_healthy"])))
    assert dom.find("g", "slow-node") == [] and dom.find("text", "slow") == []
    assert len([c for c in dom.find("rect", "cell") if "data-a" in c]) == 12


def test_a_failed_pair_is_a_cross_not_a_number(results):
    twin = copy.deepcopy(results["sweep_healthy"])
    twin["pairs"][0].update(status="timeout", busbw_gbps=None)
    dom = Dom(page.render(items(twin)))
    bad = dom.find("rect", "timeout")
    assert len(bad) == 2 and all(b["data-value"] == "" for b in bad)


# ----------------------------------------------------------------------------- nanoGPT


def test_nanogpt_charts_every_history_point(results):
    doc = results["nanogpt"]
    history = doc["metrics"]["history"]
    dom = Dom(page.render(items(doc)))
    charts = {s["data-chart"]: s for s in dom.find("svg", "chart")}
    assert {"loss-1", "tokens-1"} <= set(charts)
    assert [int(g["data-points"]) for g in dom.find("g", "series")] == [len(history), len(history)] == [60, 60]
    assert {"Iteration", "Loss", "Tokens per second"} <= set(dom.text_in("text", "axis-label"))
    assert "8.2036 \u2192 0.3083" in html_text(dom)


def test_nanogpt_without_history_says_so(results):
    doc = json.loads(report_samples.NANOGPT_RESULT.read_text())
    del doc["metrics"]["history"]
    dom = Dom(page.render(items(report_samples.nanogpt(doc=doc))))
    assert dom.find("svg", "chart") == [] and dom.find("p", "no-history")


@pytest.mark.parametrize("iters", [300, 501, 5000, 100_003])
def test_nanogpt_history_stays_bounded_and_even(iters):
    """run-nanogpt's per-interval history (scripts/nanogpt.add_point): at most HISTORY_MAX + 1 points, evenly
    spaced, ending at the run's last interval, however long the run."""
    history: list[dict] = []
    stride = 1
    for k in range(1, iters + 1):
        stride = nanogpt.add_point(history, stride, k, k == iters, {"iter": k})
    got = [p["iter"] for p in history]
    assert len(got) <= nanogpt.HISTORY_MAX + 1 and got[-1] == iters
    assert {b - a for a, b in zip(got[:-1], got[1:-1], strict=False)} <= {stride}
    assert got[0] == stride and (iters <= nanogpt.HISTORY_MAX) == (stride == 1)


def html_text(dom: Dom) -> str:
    return " ".join(t for _, t in dom.texts)


# ----------------------------------------------------------------------------- environment


def test_environment_table_shows_each_node_and_marks_a_difference(results):
    doc = copy.deepcopy(results["nanogpt"])
    doc["environment_check"] = {"expected": {"FI_PROVIDER": "efa", "NCCL_SOCKET_IFNAME": "^docker,lo,veth"},
                                "effective": {"ip-10-1-0-10": {"FI_PROVIDER": "efa",
                                                               "NCCL_SOCKET_IFNAME": "^docker,lo,veth"},
                                              "ip-10-1-0-11": {"NCCL_SOCKET_IFNAME": "eth0"}},
                                "problems": ["FI_PROVIDER is missing in the job (on ip-10-1-0-11)"], "ok": False}
    dom = Dom(page.render(items(doc)))
    assert [a for t, a in dom.tags if t == "th" and a.get("class") == "host"] and \
        {"ip-10-1-0-10", "ip-10-1-0-11"} <= set(dom.text_in("th", "host"))
    assert len(dom.find("td", "diff")) == 2  # ip-10-1-0-11: FI_PROVIDER unset, NCCL_SOCKET_IFNAME different
    assert dom.find("li", "problem")
    healthy = copy.deepcopy(doc)
    healthy["environment_check"]["effective"]["ip-10-1-0-11"] = dict(healthy["environment_check"]["expected"])
    healthy["environment_check"].update(problems=[], ok=True)
    assert Dom(page.render(items(healthy))).find("td", "diff") == []


# ----------------------------------------------------------------------------- accepted shapes


def test_node_program_files_and_the_rehearsal_summary_are_read(results, tmp_path):
    """The files the node programs write (their own keys, no TestResult around them) and a rehearsal's JSON."""
    sweep_file = {k: v for k, v in results["sweep"].items() if k not in ("test", "backend", "cluster")}
    sweep_file["result"] = "/fsx/hpq-results/nccl-sweep-20261126-101500-job42.json"
    got = load.from_doc("s.json", sweep_file)[0]
    assert got.kind == "sweep" and got.cluster is None and got.when == "2026-11-26 10:15:00 (node clock)"
    nano = json.loads(report_samples.NANOGPT_RESULT.read_text())
    assert load.from_doc("n.json", nano)[0].kind == "nanogpt"
    rehearsal = {"variant": "slurm-gpu", "run_id": "r1", "stages": {}, "cluster": {"name": "hpq-rehearsal"},
                 "worker_instance_type": "ml.g5.16xlarge", "nccl": results["g5"], "nanogpt": nano,
                 "sweep": {"slow_nodes": None, "scores": None, "pairs": None},
                 "environment": {"expected": {}, "effective": {"w1": {}}, "problems": [], "ok": True}}
    got = load.from_doc("rehearsal.json", rehearsal)
    assert [(i.kind, i.cluster, i.backend) for i in got] == [("nccl", "hpq-rehearsal", "rehearsal"),
                                                             ("nanogpt", "hpq-rehearsal", "rehearsal")]
    assert got[0].environment_check == rehearsal["environment"]


@pytest.mark.parametrize("content,why", [
    (b"\xff\xfe{}", "is not UTF-8 text"),
    (b"{not json", "is not JSON"),
    (b"[1, 2]", "holds a JSON list, not a result object"),
    (b'{"a": 1}', "is not an hpq result"),
    (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
    (b'{"run_id": "r", "variant": "v", "stages": {}}', "the rehearsal holds no validation result"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, content, why):
    (tmp_path / "in.json").write_bytes(content)
    res = hpq("report", "in.json", "-o", "out.html", cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("hpq: error: ") and why in res.stderr, res.stderr
    assert not (tmp_path / "out.html").exists()


def test_too_large_and_too_many_are_refused(tmp_path):
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(load.MAX_FILE_BYTES + 1)
    res = hpq("report", "big.json", cwd=tmp_path)
    assert res.returncode == 2 and "at most 16777216 are accepted" in res.stderr
    with pytest.raises(load.ReportInputError, match="at most 64"):
        load.load(["x.json"] * 65)
    sparse = tmp_path / "sparse.json"
    with sparse.open("wb") as fh:
        fh.truncate(load.MAX_FILE_BYTES)  # each under the per-file bound, five together over the total
    with pytest.raises(load.ReportInputError, match="add up to 83886080 bytes, over 67108864"):
        load.load([str(sparse)] * 5)
    with pytest.raises(load.ReportInputError, match="over 16777216 bytes"):  # the loader's own bound (no CLI)
        load.read_json(str(big))


def test_nan_and_huge_numbers_are_no_numbers():
    assert load.num(float("nan")) is None and load.num(10 ** 400) is None and load.num(True) is None
    doc = json.loads('{"x": NaN}', parse_constant=lambda _: None)
    assert doc == {"x": None}


# ----------------------------------------------------------------------------- where it writes


def test_writes_then_replaces_its_own_report_but_not_another_file(results, tmp_path):
    report_samples.write(tmp_path, "p5.json", results["p5"])
    res = hpq("report", "p5.json", "-o", "r.html", "--title", "first", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout == "wrote r.html: 1 result(s), overall PASS\n", res.stderr
    assert output.is_report(tmp_path / "r.html")
    res = hpq("report", "p5.json", "-o", "r.html", "--title", "second", cwd=tmp_path)
    assert res.returncode == 0 and "<title>second</title>" in (tmp_path / "r.html").read_text()
    (tmp_path / "notes.html").write_text("<p>my notes</p>")
    res = hpq("report", "p5.json", "-o", "notes.html", cwd=tmp_path)
    assert res.returncode == 2 and "exists and is not an hpq report" in res.stderr
    assert (tmp_path / "notes.html").read_text() == "<p>my notes</p>"
    res = hpq("report", "p5.json", "-o", "notes.html", "--force", cwd=tmp_path)
    assert res.returncode == 0 and output.is_report(tmp_path / "notes.html")
    os.symlink(tmp_path / "r.html", tmp_path / "link.html")
    res = hpq("report", "p5.json", "-o", "link.html", "--force", cwd=tmp_path)
    assert res.returncode == 2 and "symbolic link" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.html", "notes.html", "p5.json", "r.html"], \
        "no staged file left behind"


def test_the_page_needs_nothing_from_outside(results):
    """Self-contained: no script, no external stylesheet, image or font; links only within the page."""
    html = page.render(items(results["p5"], results["sweep"], results["nanogpt"]))
    dom = Dom(html)
    assert not [t for t, _ in dom.tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    assert all(a["href"].startswith("#") for t, a in dom.tags if "href" in a)
    assert not [a for _, a in dom.tags if "src" in a]
    assert "url(" not in html and "@import" not in html


# ----------------------------------------------------------------------------- hostile text (Hypothesis)

HOSTILE = st.lists(st.sampled_from(list("<>&\"'/=; :\nab\u202e") + ["<script>", "</svg>", " onload=", "&amp;", "<!--",
                                                                  "]]>", "<b>", " vs ", ": "]),
                   min_size=1, max_size=12).map("".join)


def structure(html: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(t, tuple(sorted(a))) for t, a in Dom(html).tags]


def _hostile_copy(results: dict, name: str, nodes: list[str], env_value: str, message: str) -> list[load.Item]:
    sweep = copy.deepcopy(results["sweep"])
    rename = dict(zip(sweep["hosts"], nodes, strict=True))
    sweep["hosts"] = nodes
    sweep["slow_nodes"] = [rename[n] for n in sweep["slow_nodes"]]
    sweep["scores"] = {rename[k]: v for k, v in sweep["scores"].items()}
    for p in sweep["pairs"]:
        p["nodes"] = [rename[n] for n in p["nodes"]]
        p["note"] = message
    nano = copy.deepcopy(results["nanogpt"])
    nano["environment_check"] = {"expected": {"FI_PROVIDER": env_value},
                                 "effective": {nodes[0]: {"FI_PROVIDER": env_value, "X": message}},
                                 "problems": [message], "ok": False}
    nccl = copy.deepcopy(results["p5"])
    nccl["message"] = "FAIL: " + message + " vs " + message + ": " + message
    for doc in (sweep, nano, nccl):
        doc["cluster"] = name
    return items(nccl, sweep, nano)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=HOSTILE, nodes=st.lists(HOSTILE, min_size=4, max_size=4, unique=True), env_value=HOSTILE,
       message=HOSTILE)
def test_hostile_text_never_becomes_markup(results, name, nodes, env_value, message):
    """A cluster name, node names, an environment value and a log line made of markup characters change no
    element of the page: the tags and attribute names are those of the same page made from plain names."""
    hostile = page.render(_hostile_copy(results, name, nodes, env_value, message), title=name)
    plain = page.render(_hostile_copy(results, "c", ["n0", "n1", "n2", "n3"], "v", "m"), title="c")
    assert structure(hostile) == structure(plain)
    assert "<script" not in hostile.lower()
