import json,glob,statistics as st,sys,collections
R=sys.argv[1]
for pref in ['ab128','ab256']:
    data=collections.defaultdict(lambda: collections.defaultdict(list))
    p10=collections.defaultdict(lambda: collections.defaultdict(list))
    for f in sorted(glob.glob(f'{R}/{pref}-[0-9]/bench.jsonl')):
        for l in open(f):
            r=json.loads(l)
            if r.get('kind')!='row' or r.get('status')!='ok': continue
            data[r['key']][r['tiles']].append(r['timing']['median_ms'])
            p10[r['key']][r['tiles']].append(r['timing']['p10_ms'])
    for k,v in data.items():
        t=sorted(v)
        a,b=t[0],t[1]
        ma,mb=st.median(v[a]),st.median(v[b])
        pa,pb=min(p10[k][a]),min(p10[k][b])
        print(f"{k:40s} {a} {ma:.4f} {b} {mb:.4f} med {100*(mb/ma-1):+.1f}%  p10min {100*(pb/pa-1):+.1f}%  runs {[round(x,4) for x in v[a]]} {[round(x,4) for x in v[b]]}")
