"""The peak of a PyTorch memory snapshot as memory_viz's Active Memory Timeline draws it (the
rule ../shared/REFERENCE.md writes down): a block is live from `alloc` to `free_completed` (a
lone `free_requested` changes nothing); memory in use before the trace began is a free of an
address the trace never allocated (at the free's size) and a block `active_allocated` at the
dump whose address the trace never names (at its requested size); the device is the one with
the longest trace. Written from that rule alone, to check `hbm report` against.

Usage: python3 snapshot_peak.py SNAPSHOT.pickle   (a snapshot this machine's PyTorch wrote:
pickle.load runs what the file says, so never give it one from elsewhere)
Prints {"device": N, "peak_bytes": ..., "trace_events": ..., "reserved_bytes": ...}."""
import json
import pickle
import sys


def live_before(events, segments, device):
    """Bytes in use before the trace: frees of addresses it never allocated, and active blocks
    at the dump that it never names."""
    named, before = set(), 0
    for e in events:
        if e["action"] == "free_completed" and e["addr"] not in named:
            before += e["size"]
        if e["action"] in ("alloc", "free_completed"):
            named.add(e["addr"])
    for seg in segments:
        if seg.get("device", device) != device:
            continue
        addr = seg["address"]
        for block in seg.get("blocks", []):
            block_addr = block.get("address", addr)
            addr = block_addr + block["size"]
            if block.get("state") in ("active_allocated", "active_pending_free") \
                    and block_addr not in named:
                before += block.get("requested_size", block["size"])
    return before


def peak(snapshot):
    traces = snapshot.get("device_traces", [])
    device = max(range(len(traces)), key=lambda d: len(traces[d])) if traces else 0
    events = traces[device] if traces else []
    segments = snapshot.get("segments", [])
    now = live_before(events, segments, device)
    high, live = now, {}
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            now += e["size"]
        elif e["action"] == "free_completed":
            now -= live.pop(e["addr"], e["size"])
        high = max(high, now)
    reserved = sum(s["total_size"] for s in segments if s.get("device", device) == device)
    return {"device": device, "peak_bytes": high, "trace_events": len(events),
            "reserved_bytes": reserved}


def main(path):
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    print(json.dumps(peak(snapshot)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
