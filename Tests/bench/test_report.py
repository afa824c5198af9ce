"""The record's verdicts: issue 9's targets read from the medians as the issue states them
(`python3 -m pytest Tests/bench/test_report.py`; no mounts, no servers)."""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402


def entry(**median):
    return {"runs": [median], "median": median}


def record(servers):
    return {"date": "2026-11-24T00:00:00+00:00", "quick": False, "runs": 3, "cold": True, "minutes": 1.0,
            "machine": {"nproc": 2, "cpu": "cpu", "memory": "1 GiB", "kernel": "6", "system": "Debian"},
            "versions": {"docfs": "0.1.0"},
            "sizes": {"big_mib": 1024, "many": 5000, "tree_dirs": 40, "cat_files": 200, "cat_kib": 64,
                      "write_mib": 256, "huge": 100000},
            "servers": servers}


def verdicts(servers):
    return {title: row for title, row in report.targets(record(servers))}


def test_a_ratio_at_the_limit_is_met_and_above_it_is_not():
    at = verdicts({"docfs-serve": {"ttfb": {"docfs": entry(s=0.0030), "curl": entry(s=0.0020)}}})
    above = verdicts({"docfs-serve": {"ttfb": {"docfs": entry(s=0.0031), "curl": entry(s=0.0020)}}})
    title = "first byte <= 1.5x one ranged GET of 1 byte (curl)"
    assert at[title]["docfs-serve"][0] is True
    assert above[title]["docfs-serve"] == (False, "1.55x")


def test_throughput_targets_compare_the_other_way():
    got = verdicts({"docfs-serve": {"seqread": {"docfs": entry(**{"MiB/s": 700.0}), "curl": entry(**{"MiB/s": 1000.0}),
                                                "rclone-full": entry(**{"MiB/s": 300.0})}}})
    assert got["sequential read >= 0.8x curl GET"]["docfs-serve"][0] is False
    assert got["sequential read >= 2x rclone mount full"]["docfs-serve"][0] is True


def test_cold_listing_is_held_to_the_best_peer_and_warm_to_local_disk_of_the_webdav_store():
    servers = {"docfs-serve": {"ls5k": {"docfs": entry(s=0.2), "rclone-full": entry(s=0.5), "davfs2": entry(s=0.3),
                                        "local disk": entry(s=0.05)},
                               "ls5k-warm": {"docfs": entry(s=0.09)}},
               "seaweedfs": {"ls5k-warm": {"docfs": entry(s=0.2)}}}
    got = verdicts(servers)
    assert got["cold `ls -l` of 5,000 <= 0.5x the best peer"]["docfs-serve"] == (False, "0.67x")
    warm = got["`ls -l` of 5,000 after a remount <= 2x local disk"]
    assert warm["docfs-serve"][0] is True
    assert warm["seaweedfs"][0] is False


def test_huge_folder_needs_completion_memory_and_no_rewritten_rows():
    good = entry(s=9.0, rss_mib=60.0, refresh_child_rows=0, refresh_other_rows=2)
    rewritten = entry(s=9.0, rss_mib=60.0, refresh_child_rows=100000, refresh_other_rows=2)
    heavy = entry(s=9.0, rss_mib=65.0, refresh_child_rows=0, refresh_other_rows=2)
    title = "100,000 entries: `ls -l` completes, peak RSS <= 64 MiB, a refresh writes no rows"
    assert verdicts({"docfs-serve": {"huge": {"docfs": good}}})[title]["docfs-serve"][0] is True
    assert verdicts({"docfs-serve": {"huge": {"docfs": rewritten}}})[title]["docfs-serve"][0] is False
    assert verdicts({"docfs-serve": {"huge": {"docfs": heavy}}})[title]["docfs-serve"][0] is False


def test_markdown_shows_ratios_and_failures():
    servers = {"docfs-serve": {"cat200": {"docfs": entry(s=0.1, requests=201), "davfs2": entry(s=0.2, requests=205),
                                          "rclone-off": {"runs": [{"error": "boom"}], "median": {}, "errors": ["boom"]}}}}
    text = report.markdown(record(servers))
    assert "| `cat` of 200 x 64 KiB in 40 folders | 0.100 s (201 req) | failed | 0.200 s (205 req) · **0.50** |" in text
    assert "cat200 / rclone-off failed: `boom`" in text
    assert "| `cat` of 200 x 64 KiB <= davfs2 | met: 0.50x |" in text


def test_the_fuse_floor_is_shown_against_the_same_peer_as_docfs():
    servers = {"docfs-serve": {"stat5k": {"docfs": entry(s=0.15), "local disk": entry(s=0.05), "fuse floor": entry(s=0.14)},
                               "ls5k": {"docfs": entry(s=0.4), "davfs2": entry(s=0.4), "fuse floor": entry(s=0.25)}},
               "rclone-serve": {"ls5k": {"docfs": entry(s=0.5), "davfs2": entry(s=0.5)}}}
    got = verdicts(servers)
    assert got["`stat` of 5,000 names <= 2x local disk"]["docfs-serve"] == (False, "3.00x (FUSE floor 2.80x)")
    cold = got["cold `ls -l` of 5,000 <= 0.5x the best peer"]
    assert cold["docfs-serve"] == (False, "1.00x (FUSE floor 0.62x)")
    assert cold["rclone-serve"] == (False, "1.00x (FUSE floor 0.50x)")
    text = report.markdown(record(servers))
    assert "| `stat` of the 5,000 names (folder listed) | 0.150 s |  | 0.050 s · **3.00** | 0.140 s · **1.07** |" in text
