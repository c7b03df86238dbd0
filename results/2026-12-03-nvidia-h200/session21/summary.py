"""Summary of a session-21 call's results folder: A/B pairs (min of the medians over the runs of
each build, by prefix) and rows with peers (ours over FA2 and cuDNN). Usage: summary.py RES."""
import json, os, sys, glob, re, statistics

R = sys.argv[1]


def rows(d):
    out = {}
    for fn in ['bench.jsonl', 'peers.jsonl']:
        p = os.path.join(R, d, fn)
        if not os.path.exists(p):
            continue
        for l in open(p):
            r = json.loads(l)
            if r.get('kind') == 'row' and r.get('timing'):
                out.setdefault(r['key'], {}).setdefault(r['method'], (r['timing']['median_ms'], r.get('tflops') or 0))
    return out


dirs = sorted(os.path.basename(d) for d in glob.glob(os.path.join(R, '*')) if os.path.isdir(d))
groups = {}
for d in dirs:
    m = re.match(r'(\w+?)-(old|new)-(\d+)$', d)
    if m:
        groups.setdefault(m.group(1), {}).setdefault(m.group(2), []).append(d)
for g, v in groups.items():
    old = [rows(d) for d in v.get('old', [])]
    new = [rows(d) for d in v.get('new', [])]
    if not old or not new:
        continue
    for k in old[0]:
        a = [x[k]['auto'][0] for x in old if k in x and 'auto' in x[k]]
        b = [x[k]['auto'][0] for x in new if k in x and 'auto' in x[k]]
        if a and b:
            print('AB %s %s old %.4f new %.4f change %+.1f%% (n=%d/%d)' % (g, k, min(a), min(b), 100 * (min(b) / min(a) - 1), len(a), len(b)))
for d in dirs:
    for k, v in rows(d).items():
        fl = v.get('torch-flash'); c = v.get('torch-cudnn'); t = v.get('auto'); fx = v.get('torch-flex')
        if t and (fl or c or fx):
            print(d, k, 'auto %.4f ms %.1f TF' % t + (' x_fa2 %.3f' % (fl[0] / t[0]) if fl else '')
                  + (' x_cudnn %.3f' % (c[0] / t[0]) if c else '') + (' x_flex %.3f' % (fx[0] / t[0]) if fx else ''))
