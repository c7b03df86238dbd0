import json,os,csv,glob,statistics as st
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
    return out
for kind in ['head','win','alibi']:
    o=[rows('ab-old-%d-%s'%(i,kind)) for i in (1,2)]
    n=[rows('ab-new-%d-%s'%(i,kind)) for i in (1,2)]
    for k in o[0]:
        try:
            a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
            print('AB %s %s old %.4f new %.4f change %+.1f%% (runs old %s new %s)'%(kind,k,a,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],[round(x[k]['auto'][0],4) for x in n]))
        except KeyError: pass
def durs(f):
    v=[]
    try:
        for r in csv.reader(open(f)):
            if len(r)>5 and r[-3]=='gpu__time_duration.sum':
                x=float(r[-1].replace(',','')); u=r[-2]
                v.append(x/1000 if u in ('us','usecond') else x/1e6 if u in ('ns','nsecond') else x)
    except Exception as e: print('parse',f,e)
    return v
for f in sorted(glob.glob(R+'/ncu-old-*.csv')):
    g=f.replace('ncu-old-','ncu-new-')
    a,b=durs(f),durs(g)
    if a and b:
        print('NCU %s old %.4f ms (n=%d) new %.4f ms (n=%d) change %+.1f%%'%(os.path.basename(f)[8:-4],st.median(a),len(a),st.median(b),len(b),100*(st.median(b)/st.median(a)-1)))
    else: print('NCU missing',f,len(a),len(b))
for d in ['mods-alibi','mods-window','mods-softcap']:
    for k,v in rows(d).items():
        fx=v.get('torch-flex'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' flex %.4f ms %.1f TF x_flex %.3f'%(fx[0],fx[1],fx[0]/t[0]) if fx else ''))
