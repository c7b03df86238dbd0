import csv,sys,collections
def load(f):
    rows=list(csv.reader(open(f)))
    hdr=rows[1]; ix=hdr.index('Instructions Executed'); sx=hdr.index('Warp Stall Sampling (All Samples)')
    ops=collections.Counter(); smp=collections.Counter(); seq=[]
    for r in rows[2:]:
        if len(r)<=ix: continue
        src=r[1].strip()
        op=src.split()[0] if not src.startswith('@') else src.split()[1]
        op=op.split('.')[0]
        n=int(r[ix] or 0); s=int(r[sx] or 0)
        ops[op]+=n; smp[op]+=s; seq.append((src,n,s))
    return ops,smp,seq
a,asmp,aseq=load('bwd-alibi-sass.csv'); p,psmp,pseq=load('bwd-plain-sass.csv')
print('total', sum(a.values()), sum(p.values()), 'samples', sum(asmp.values()), sum(psmp.values()))
diff=sorted(set(a)|set(p), key=lambda k: -(a[k]-p[k]))
for k in diff[:20]: print('%-10s alibi %12d plain %12d diff %+12d   samples %8d %8d'%(k,a[k],p[k],a[k]-p[k],asmp[k],psmp[k]))
