"""The sweep's schedule and statistics (hpq.scripts.sweep), as properties over many clusters.

Pure: no processes. Seeded random clusters stand in for property-based generation (no
hypothesis in the test environment); each property is checked over hundreds of cases.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest

from hpq.scripts import sweep
from hpq.scripts.sweep import FAILED, OK, SKIPPED, TIMEOUT, PairResult


def names(n: int) -> list[str]:
    return [f"ip-10-1-{i // 250}-{i % 250 + 4}" for i in range(n)]


@pytest.mark.parametrize("n", range(2, 41))
def test_schedule_properties(n):
    nodes = names(n)
    rounds = sweep.schedule(nodes)
    seen: set[frozenset] = set()
    for r in rounds:
        in_round = [x for pair in r for x in pair]
        assert len(in_round) == len(set(in_round)), f"a node is in two pairs of one round: {r}"
        assert len(r) == n // 2, "every node but a bye plays each round"
        for a, b in r:
            assert a != b and {a, b} <= set(nodes)
            assert nodes.index(a) < nodes.index(b), "a pair is given in the nodes' order"
            key = frozenset((a, b))
            assert key not in seen, f"pair {a}+{b} scheduled twice"
            seen.add(key)
    met = {x: {p for r in rounds for pair in r if x in pair for p in pair if p != x} for x in nodes}
    assert min(len(v) for v in met.values()) >= min(sweep.MIN_PARTNERS, n - 1)
    if n <= sweep.FULL_SCHEDULE_MAX_NODES:
        assert seen == {frozenset(c) for c in itertools.combinations(nodes, 2)}, "all pairs up to 16 nodes"
        assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    else:
        assert len(rounds) == sweep.LARGE_CLUSTER_ROUNDS
        assert min(len(v) for v in met.values()) >= sweep.LARGE_CLUSTER_ROUNDS - 1


def test_schedule_edges():
    assert sweep.schedule(["a"]) == [] and sweep.schedule([]) == []
    assert sweep.schedule(["a", "b"]) == [[("a", "b")]]
    with pytest.raises(ValueError, match="duplicate"):
        sweep.schedule(["a", "b", "a"])
    assert len(sweep.schedule(names(10), rounds=2)) == 2


def simulate(capacity: dict[str, float], rng: random.Random, noise: float, failing: tuple[str, ...] = ()):
    """Pairs as a fabric with these per-node speeds would measure them: the slower node sets the pace."""
    out = []
    for rno, r in enumerate(sweep.schedule(list(capacity)), 1):
        for a, b in r:
            if a in failing or b in failing:
                out.append(PairResult(rno, (a, b), TIMEOUT, seconds=180.0))
                continue
            bw = min(capacity[a], capacity[b]) * (1 + rng.uniform(-noise, noise))
            out.append(PairResult(rno, (a, b), OK, busbw_gbps=bw))
    return out


def verdict(capacity, rng, noise=0.05, failing=()):
    pairs = simulate(capacity, rng, noise, failing)
    return sweep.build_report(list(capacity), pairs, 0, 1 << 28), pairs


def test_a_single_outlier_is_named_and_only_it():
    rng = random.Random(14)
    for case in range(300):
        n = rng.randint(4, 32)
        base = rng.uniform(1.0, 480.0)
        nodes = names(n)
        cap = {x: base for x in nodes}
        slow = rng.choice(nodes)
        cap[slow] = base * rng.uniform(0.02, 0.6)
        doc, pairs = verdict(cap, rng)
        assert doc["slow_nodes"] == [slow], (case, n, doc["scores"])
        assert doc["exit_code"] == 1
        # the evidence is every pair of the slow node, each against a healthy partner
        ev = doc["evidence"][slow]
        mine = [p for p in pairs if slow in p.nodes]
        assert len(ev) == len(mine) and all(slow in e["nodes"] for e in ev)
        assert all(e["busbw_gbps"] < base * 0.7 for e in ev)


def test_uniform_noise_never_flags():
    """Every pair within +-10% of one speed: the spread is below MIN_GAP, so no node is named."""
    rng = random.Random(7)
    for _case in range(300):
        n = rng.randint(2, 32)
        cap = {x: 48.0 for x in names(n)}
        doc, _ = verdict(cap, rng, noise=0.10)
        assert doc["slow_nodes"] == [], doc["scores"]
        if n == 2:  # two nodes: a slow one could not be told from its partner, so no pass either
            assert doc["exit_code"] == 3 and doc["message"].startswith("INCONCLUSIVE: ")
        else:
            assert doc["exit_code"] == 0 and doc["message"].startswith("PASS: ") and doc["outcome"] == "PASS"


def test_all_nodes_agree_exactly():
    doc, _ = verdict({x: 12.0 for x in names(8)}, random.Random(1), noise=0.0)
    assert doc["slow_nodes"] == [] and doc["mad_ln"] == 0 and doc["median_gbps"] == pytest.approx(12.0)
    assert doc["threshold_gbps"] == pytest.approx(12.0 * (1 - sweep.MIN_GAP))


def test_two_slow_nodes_of_eight_are_both_flagged():
    rng = random.Random(2)
    for _case in range(200):
        nodes = names(8)
        cap = {x: 400.0 for x in nodes}
        slow = sorted(rng.sample(nodes, 2))
        for s in slow:
            cap[s] = 400.0 * rng.uniform(0.05, 0.6)
        doc, _ = verdict(cap, rng)
        assert sorted(doc["slow_nodes"]) == slow, doc["scores"]
        for s in slow:  # the other slow node is not a healthy partner: its pair is no evidence
            other = [x for x in slow if x != s][0]
            assert all(other not in e["nodes"] for e in doc["evidence"][s])
            assert len(doc["evidence"][s]) == 6


def test_half_slow_partners_do_not_drag_a_healthy_node_down():
    """5 nodes, 2 slow: a healthy node met both among its 4 partners; its score is the high median (its
    healthy pairs), so only the two slow nodes are named."""
    nodes = names(5)
    cap = {x: 390.0 for x in nodes}
    cap[nodes[1]], cap[nodes[3]] = 80.0, 20.0
    doc, _ = verdict(cap, random.Random(9), noise=0.0)
    assert doc["slow_nodes"] == [nodes[3], nodes[1]]
    assert {n: s for n, s in doc["scores"].items() if n not in doc["slow_nodes"]} == dict.fromkeys(
        [nodes[0], nodes[2], nodes[4]], 390.0)
    assert sweep.median_high([1, 2, 3, 4]) == 3 and sweep.median([1, 2, 3, 4]) == 2.5


def test_mad_margin_protects_a_noisy_cluster():
    """Scores spread +-15%: a node 25% under the median passes the gap but not the MAD margin, so it is
    not named; one at 40% of the median is."""
    scores = {f"n{i}": float(v) for i, v in enumerate([100, 95, 90, 85, 105, 110, 115, 100])}
    scores["n8"] = 75.0
    j = sweep.judge(scores)
    assert j.slow == [] and j.threshold_gbps < 75 < 100 * (1 - sweep.MIN_GAP)
    scores["n8"] = 40.0
    assert sweep.judge(scores).slow == ["n8"]


def test_a_dead_node_is_named_from_failed_pairs():
    """Every pair with the dead node times out (0 GB/s): it is named; its partners' medians hold."""
    rng = random.Random(3)
    nodes = names(6)
    doc, _ = verdict({x: 100.0 for x in nodes}, rng, failing=(nodes[4],))
    assert doc["slow_nodes"] == [nodes[4]] and doc["scores"][nodes[4]] == 0.0
    assert doc["failed_pairs"] == 5 and doc["exit_code"] == 1
    assert all(s > 90 for n, s in doc["scores"].items() if n != nodes[4])
    text = sweep.format_report(doc)
    assert "TIMEOUT after 180 s" in text and "pairs that failed" in text


def test_every_pair_failed_is_a_failure_not_a_pass():
    pairs = [PairResult(1, ("a", "b"), FAILED, exit_status=1, note="exit 1")]
    doc = sweep.build_report(["a", "b"], pairs, 1, 1 << 20)
    assert doc["exit_code"] == 1 and doc["slow_nodes"] == [] and "every pair failed" in doc["message"]


def test_three_nodes_pin_the_node_common_to_the_slow_pairs():
    nodes = names(3)
    doc, _ = verdict({nodes[0]: 48.0, nodes[1]: 6.0, nodes[2]: 47.0}, random.Random(4), noise=0.0)
    assert doc["slow_nodes"] == [nodes[1]] and doc["notes"] == []


def test_two_nodes_cannot_be_told_apart():
    doc = sweep.build_report(["a", "b"], [PairResult(1, ("a", "b"), OK, busbw_gbps=0.5)], 1, 1 << 20)
    assert doc["slow_nodes"] == [] and doc["exit_code"] == 3 and doc["outcome"] == "INCONCLUSIVE"
    assert any("met only one partner" in n for n in doc["notes"]) and "only 2 node(s) measured" in doc["message"]


def test_transport_on_an_efa_type():
    """expect_efa (the workers' type has EFA): a pair whose log says TCP fails the sweep whatever its speed; a pair
    whose log names no network leaves it INCONCLUSIVE; every pair on EFA can pass."""
    def pairs(transports):
        nodes = ["a", "b", "c"]
        return [PairResult(1, (x, y), OK, busbw_gbps=40.0, transport=t)
                for (x, y), t in zip([("a", "b"), ("a", "c"), ("b", "c")], transports, strict=True)], nodes
    ps, nodes = pairs(["efa", "efa", "socket"])
    doc = sweep.build_report(nodes, ps, 3, 1 << 28, expect_efa=True)
    assert doc["exit_code"] == 1 and "did not use EFA" in doc["message"] and "b+c: socket" in doc["message"]
    ps, nodes = pairs(["efa", None, "efa"])
    assert sweep.build_report(nodes, ps, 3, 1 << 28, expect_efa=True)["exit_code"] == 3
    ps, nodes = pairs(["efa"] * 3)
    assert sweep.build_report(nodes, ps, 3, 1 << 28, expect_efa=True)["exit_code"] == 0
    ps, nodes = pairs(["socket"] * 3)
    assert sweep.build_report(nodes, ps, 3, 1 << 28)["exit_code"] == 0  # a type without EFA: TCP is its transport


def test_skipped_pairs_do_not_count():
    pairs = [PairResult(1, ("a", "b"), OK, busbw_gbps=10.0), PairResult(2, ("a", "c"), SKIPPED)]
    doc = sweep.build_report(["a", "b", "c"], pairs, 2, 1 << 20)
    assert doc["scores"]["c"] is None and doc["unmeasured_nodes"] == ["c"]
    assert doc["partners"] == {"a": ["b"], "b": ["a"], "c": []}
    assert any("budget" in n for n in doc["notes"]) and any("a, b met only one partner" in n for n in doc["notes"])


def test_report_text_and_actions():
    rng = random.Random(5)
    nodes = names(5)
    cap = {x: 48.0 for x in nodes}
    cap[nodes[2]] = 6.0
    doc, _ = verdict(cap, rng, noise=0.0)
    slow = nodes[2]
    assert doc["actions"][slow] == [
        f'scontrol update NodeName={slow} State=DRAIN Reason="hpq sweep: 6.00 GB/s vs median 48.00"',
        f"sbatch --exclude={slow}"]
    text = sweep.format_report(doc)
    assert f"SLOW {slow}: 6.00 GB/s vs median 48.00 GB/s" in text
    assert f'scontrol update NodeName={slow} State=DRAIN Reason="hpq sweep: 6.00 GB/s vs median 48.00"' in text
    table = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("ip-")}
    assert table[slow][1:] == ["6.00", "4", "SLOW"] and table[nodes[0]][3] == "ok"
    # the verdict's headline leads (issue 25: read at a glance), the node table and the evidence follow it
    assert text.splitlines()[0] == doc["message"] and doc["message"].startswith("FAIL: 1 slow node(s): " + slow)
    assert text.index("FAIL: ") < text.index("score(GB/s)") < text.index("SLOW " + slow) < text.index("scontrol")
    assert text.count(doc["message"]) == 1 and "(commands below)" in doc["message"]
    # the JSON survives a round trip, and the laptop renders the same text from it
    back = json.loads(json.dumps(doc))
    assert sweep.format_report(back) == text
    assert sweep.extract_json("progress\n" + json.dumps(doc, indent=2) + "\n") == back
    assert sweep.extract_json("no json here\n{broken\n") is None


def test_cpu_gap_tolerates_gloo_noise():
    """gloo on shared CPUs: pairs varying 2x run to run name no node at the CPU gap, a throttled link still is."""
    rng = random.Random(11)
    for _case in range(200):
        nodes = names(rng.randint(3, 8))
        pairs = [PairResult(rno, pair, OK, busbw_gbps=rng.uniform(0.6, 1.2))
                 for rno, r in enumerate(sweep.schedule(nodes), 1) for pair in r]
        assert sweep.build_report(nodes, pairs, 0, 1 << 20, min_gap=sweep.MIN_GAP_CPU)["slow_nodes"] == []
        slow = rng.choice(nodes)
        for p in pairs:
            if slow in p.nodes:
                p.busbw_gbps = 0.004  # 30 Mbit/s
        doc = sweep.build_report(nodes, pairs, 0, 1 << 20, min_gap=sweep.MIN_GAP_CPU)
        assert doc["slow_nodes"] == [slow] and doc["min_gap"] == sweep.MIN_GAP_CPU


def test_default_size_by_transport():
    assert sweep.default_size("efa-rdma", False) == 256 << 20
    assert sweep.default_size("efa-sendrecv", False) == 256 << 20
    assert sweep.default_size("tcp", False) < 256 << 20
    assert sweep.default_size("tcp", True) < sweep.default_size("tcp", False)


def test_extract_json_is_linear_on_unclosed_objects():
    """Issue 21's class for the SSH capture: 20k lines that open an object and never close it, then the result."""
    import time

    doc = sweep.build_report(["a", "b", "c"], [PairResult(1, ("a", "b"), OK, busbw_gbps=10.0)], 1, 1 << 20)
    junk = '{"x": [1,\n' * 20_000
    start = time.monotonic()
    assert sweep.extract_json(junk + json.dumps(doc, indent=2) + "\n")["hosts"] == ["a", "b", "c"]
    assert time.monotonic() - start < 2.0
