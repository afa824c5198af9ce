"""The latency record's verdicts and its proxy's request counting, with no mounts and no servers
(`python3 -m pytest Tests/bench/test_latency_report.py`)."""
import io, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import latency_report  # noqa: E402
from delay_proxy import RequestLog, kind_of  # noqa: E402
from latency_workloads import FarSizes, floor_round_trips  # noqa: E402


def entry(runs=None, **median):
    return {"runs": runs or [median], "median": median}


def section(results, floors=None, delay=20):
    return {"server": "rclone-serve", "delay_ms": delay, "runs": 1, "date": "2026-11-29", "budget": 240,
            "quick": False, "sizes": vars(FarSizes()), "versions": {"docfs": "0.1.0"},
            "machine": {"nproc": 2, "cpu": "cpu", "memory": "1 GiB", "kernel": "6"},
            "floors": floors or {}, "results": results}


def verdicts(sections):
    return {title: row for title, row in latency_report.targets({"sections": sections})}


def test_floor_targets_read_the_serial_floor():
    floors = {"cat200": {"round_trips": 241, "what": "", "s": 4.82}, "cp1k": {"round_trips": 1021, "what": "", "s": 20.42}}
    got = verdicts({"a@20": section({"cat200": {"docfs": entry(s=2.4)}, "cp1k": {"docfs": entry(s=5.2)}}, floors)})
    assert got["`cat` of 200 small files at 20 ms <= 0.5x the serial floor"]["a@20"] == "met: 0.50x"
    assert got["`cp -r` of 1,000 small files, until the store has them, <= 0.25x the serial floor"]["a@20"].startswith("NOT met")


def test_the_cat_target_is_only_read_at_20_ms():
    floors = {"cat200": {"round_trips": 241, "what": "", "s": 19.28}}
    got = verdicts({"a@80": section({"cat200": {"docfs": entry(s=1.0)}}, floors, delay=80)})
    assert got["`cat` of 200 small files at 20 ms <= 0.5x the serial floor"] == {}


def test_ahead_names_the_workloads_docfs_trails_and_counts_a_stopped_peer_as_behind():
    results = {"find": {"docfs": entry(s=2.0), "davfs2": entry(s=1.0)},
               "grep": {"docfs": entry(s=1.0), "rclone-full": {"runs": [], "median": {}, "timeout": 240}}}
    got = verdicts({"a@20": section(results)})["docfs ahead of every peer on every workload"]["a@20"]
    assert got == "NOT met: behind on find (2.00x davfs2)"


def test_the_cold_stat_is_held_to_the_listing():
    results = {"stat5k-cold": {"docfs": entry(s=0.30), "curl": entry(s=0.25)}}
    assert verdicts({"a@20": section(results)})["cold `stat` of 5,000 <= 1.2x the transfer of its listing"]["a@20"] == "met: 1.20x"


def test_the_report_renders_a_stopped_peer_as_a_bound():
    results = {"cp1k": {"docfs": entry(s=30.0, close_s=2.0, reqs=3000, conns=4), "davfs2": {"runs": [], "median": {}, "timeout": 240}}}
    text = latency_report.markdown({"sections": {"a@20": section(results, {"cp1k": {"round_trips": 1021, "what": "x", "s": 20.42}})}})
    assert "> 240 s (stopped) · **< 0.12**" in text
    assert "30.0 s (3000 req, 4 conn)" in text


def test_the_proxy_counts_requests_across_bodies_and_chunks():
    out = io.StringIO()
    log = RequestLog(out)
    stream = (b"PUT /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /x"
              b" HTTP/1.1\r\nHost: h\r\n\r\n"
              b"PUT /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
              b"PROPFIND /c HTTP/1.1\r\nDepth: 1\r\n\r\n")
    for i in range(0, len(stream), 7):   # in pieces, as TCP delivers them
        log.feed(stream[i:i + 7])
    assert [line.split("\t")[2] + " " + line.split("\t")[3] for line in out.getvalue().splitlines()] == \
        ["PUT /a", "GET /x", "PUT /b", "PROPFIND /c"]


def test_an_s3_listing_is_told_from_a_get():
    assert kind_of("GET", "/bench?list-type=2&prefix=many%2F") == "LIST"
    assert kind_of("GET", "/bench/many/f00001.txt") == "GET"


def test_floors_count_what_a_serial_client_cannot_avoid():
    sizes = FarSizes()
    facts = {"copy": {"files": 1000, "folders": 21}}
    assert floor_round_trips("cat200", sizes, facts, s3=False) == (241, "41 listings + 200 GETs")
    assert floor_round_trips("cp1k", sizes, facts, s3=False) == (1021, "1000 PUTs + 21 MKCOLs")
    assert floor_round_trips("cp1k", sizes, facts, s3=True) == (1000, "1000 PUTs")
    assert floor_round_trips("ls5k", sizes, facts, s3=True)[0] == 5


def test_an_answer_ends_the_oldest_wait_and_an_interim_100_does_not():
    out = io.StringIO()
    log = RequestLog(out)
    log.feed(b"PUT /a HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
    log.answer(b"HTTP/1.1 100 Continue\r\n\r\n", 1.0)
    assert "A\t" not in out.getvalue()
    log.feed(b"abc")
    log.answer(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", 2.0)
    log.answer(b"more of the same answer", 2.5)
    answers = [line for line in out.getvalue().splitlines() if line.startswith("A\t")]
    assert len(answers) == 1 and answers[0].endswith("\t2.000000")


def test_waiting_counts_overlapping_requests_once(tmp_path):
    from delay_proxy import DelayProxy
    proxy = DelayProxy.__new__(DelayProxy)
    proxy.log = str(tmp_path / "log")
    with open(proxy.log, "w") as f:
        f.write("C\t10.0\nR\t10.0\tGET\t/a\nR\t10.1\tGET\t/b\nA\t10.0\t10.2\nA\t10.1\t10.3\n"
                "R\t11.0\tGET\t/c\nA\t11.0\t11.2\n")
    got = proxy.since((0, 9.0))
    assert got["reqs"] == 3 and got["conns"] == 1
    assert abs(got["wait_s"] - 0.5) < 1e-9 and abs(got["in_flight"] - 0.6 / 0.5) < 1e-9


def test_a_stopped_docfs_is_not_met_and_behind_a_peer_that_finished():
    results = {"stat5k-cold": {"docfs": {"runs": [], "median": {}, "timeout": 120}, "rclone-full": entry(s=119.0),
                               "curl": entry(s=0.5)}}
    got = verdicts({"a@20": section(results)})
    assert got["cold `stat` of 5,000 <= 1.2x the transfer of its listing"]["a@20"] == "NOT met: > 240.00x (stopped)"
    assert got["docfs ahead of every peer on every workload"]["a@20"].startswith("NOT met: behind on stat5k-cold")
