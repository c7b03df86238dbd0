import json,os
R='res'
for d in ['bwd-bf16','bwd-f16']:
    rows={}
    for fn in ['bench.jsonl','peers.jsonl']:
        p=os.path.join(R,d,fn)
        if not os.path.exists(p): continue
        for l in open(p):
            r=json.loads(l)
            if r.get('kind')=='row' and r.get('timing') and not r.get('tiles'):
                rows.setdefault(r['key'],{})[r['method']]=(r['timing']['median_ms'],r.get('tflops') or 0)
    for k,v in rows.items():
        a=v.get('auto'); f=v.get('torch-flash'); c=v.get('torch-cudnn')
        if a: print(d,k,'ours %.1f TF'%a[1] + (' fa2 %.1f x%.3f'%(f[1],f[0]/a[0]) if f else '') + (' cudnn %.1f x%.3f'%(c[1],c[0]/a[0]) if c else ''))
