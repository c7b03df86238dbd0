import json,os
R='res'
def rows(d):
    out={}
    for fn in ['bench.jsonl','peers.jsonl']:
        p=os.path.join(R,d,fn)
        if not os.path.exists(p): continue
        for l in open(p):
            r=json.loads(l)
            if r.get('kind')=='row':
                t=r.get('timing'); k=r['key']+('' if not r.get('tiles') else ' tiles=%s'%r.get('tiles'))
                if t: out.setdefault(k,{})[r['method']]=(t['median_ms'], r.get('tflops') or 0)
                else: print('no timing', d, k, r['method'], r.get('status'))
    return out
for kind in ['head','win','alibi','fwd']:
    o=[rows('ab-old-%d-%s'%(i,kind)) for i in (1,2)]
    for nb in ['b40','new']:
        n=[rows('ab-%s-%d-%s'%(nb,i,kind)) for i in (1,2)]
        if not n[0]: continue
        for k in o[0]:
            try:
                a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
                print('AB %s %-5s %s old %.4f %s %.4f change %+.1f%% (runs old %s %s %s)'%(kind,nb,k,a,nb,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],nb,[round(x[k]['auto'][0],4) for x in n]))
            except KeyError: print('AB missing',kind,nb,k)
for d in ['mods-alibi','mods-window','mods-softcap']:
    for k,v in rows(d).items():
        fx=v.get('torch-flex'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' flex %.4f ms %.1f TF x_flex %.3f'%(fx[0],fx[1],fx[0]/t[0]) if fx else ''))
