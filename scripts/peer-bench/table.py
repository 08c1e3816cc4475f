"""The table of a transformer peer benchmark (flux_run.sh, zimage_run.sh): WORK holds peer-R.json
(the peer's forward times) and ours-R.json (fp8studio-cli bench --json) for each round R; prints
each implementation's median and range, and its ratio to the peer with the per-round ratios.

    table.py WORK ROUNDS TITLE PEER_LABEL"""
import json
import statistics
import sys


def main():
    work, rounds, title, peer_label = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    peer, ours, paired = [], {}, {}
    for r in range(1, rounds + 1):
        p = json.load(open(f"{work}/peer-{r}.json"))
        peer.extend(p["forward_ms"])
        for m in json.load(open(f"{work}/ours-{r}.json"))["generate"]:
            ours.setdefault(m["mode"], []).extend(m["step_ms"])
            paired.setdefault(m["mode"], []).append(statistics.median(m["step_ms"]) / statistics.median(p["forward_ms"]))
    ref = statistics.median(peer)
    print(f"{title}, BF16 compute, {rounds} alternated rounds; PyTorch {p['torch']}, {p['threads']} threads")
    print("| implementation | median ms | range ms | / peer BF16 (per-round ratios) |")
    print("|---|---|---|---|")
    print(f"| {peer_label}, BF16 | {ref:.0f} | {min(peer):.0f}-{max(peer):.0f} | 1.00 |")
    for mode, v in ours.items():
        ratios = paired[mode]
        print(f"| fp8studio {mode} | {statistics.median(v):.0f} | {min(v):.0f}-{max(v):.0f} | "
              f"{statistics.median(v) / ref:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
