"""The table of a peer benchmark (sd15_ldm_run.sh, flux_run.sh, zimage_run.sh): WORK holds, for
each round R, peer-R.json or peer-R-*.json (the peer's forward times: a list with its "dtype", or one
list per compute type) and
ours-R.json or ours-R-LABEL.json (fp8studio-cli bench --json; LABEL names how it ran, e.g. a
forced compute type). Prints each implementation's median and range, and its ratio to the best
peer (the lowest median) with the per-round ratios (this round's median over the same round's
best-peer median: the machine's drift cancels).

    table.py WORK ROUNDS TITLE PEER_LABEL"""
import glob
import json
import os
import statistics
import sys


def main():
    work, rounds, title, peer_label = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    peer, ours, per_round = {}, {}, []
    info = {}
    for r in range(1, rounds + 1):
        times = {}
        for path in sorted(glob.glob(f"{work}/peer-{r}.json") + glob.glob(f"{work}/peer-{r}-*.json")):
            info = json.load(open(path))
            t = info["forward_ms"]
            times.update(t if isinstance(t, dict) else {info.get("dtype", "bf16"): t})
        for dtype, v in times.items():
            peer.setdefault(dtype, []).extend(v)
        mine = {}
        for path in sorted(glob.glob(f"{work}/ours-{r}.json") + glob.glob(f"{work}/ours-{r}-*.json")):
            label = os.path.basename(path)[len(f"ours-{r}"):-len(".json")].lstrip("-")
            for m in json.load(open(path))["generate"]:
                name = m["mode"] + (f", {label}" if label else "")
                ours.setdefault(name, []).extend(m["step_ms"])
                mine[name] = statistics.median(m["step_ms"])
        per_round.append(({d: statistics.median(v) for d, v in times.items()}, mine))
    best = min(peer, key=lambda d: statistics.median(peer[d]))
    ref = statistics.median(peer[best])
    print(f"{title}; {rounds} alternated rounds; PyTorch {info['torch']}, {info.get('threads', '?')} threads")
    print(f"| implementation | median ms | range ms | / best peer ({peer_label} {best.upper()}), per-round range |")
    print("|---|---|---|---|")
    for dtype, v in peer.items():
        ratios = [p[dtype] / p[best] for p, _ in per_round]
        print(f"| {peer_label}, {dtype.upper()} | {statistics.median(v):.0f} | {min(v):.0f}-{max(v):.0f} | "
              f"{statistics.median(v) / ref:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    for name, v in ours.items():
        ratios = [m[name] / p[best] for p, m in per_round if name in m]
        print(f"| fp8studio {name} | {statistics.median(v):.0f} | {min(v):.0f}-{max(v):.0f} | "
              f"{statistics.median(v) / ref:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
