import json,sys
for d in sys.argv[1:]:
  ours={};peer={}
  for fn in ['bench.jsonl','peers.jsonl']:
    for l in open(f'{d}/{fn}'):
      r=json.loads(l)
      if r.get('kind')!='row' or not r.get('timing'): continue
      if r.get('backend')=='peer': peer.setdefault(r['key'],{})[r['method']]=r['timing']
      else: ours[r['key']]=(r['timing'],r.get('kernel'))
  for k,(t,kern) in ours.items():
    p=peer.get(k,{}); c=p.get('torch-cudnn'); f=p.get('torch-flash')
    s=f"{d.split('/')[-1]} {k:42s} ours {t['median_ms']:.4f}"
    if c: s+=f" x_cudnn {c['median_ms']/t['median_ms']:.3f} (p10 {c['p10_ms']/t['p10_ms']:.3f})"
    if f: s+=f" x_fa2 {f['median_ms']/t['median_ms']:.3f}"
    print(s, kern)
