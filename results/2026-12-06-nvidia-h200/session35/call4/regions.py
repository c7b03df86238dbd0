import csv,sys,collections
def load(fn):
    rows=list(csv.reader(open(fn)))
    hdr=rows[1]; data=rows[2:]
    ix={h:i for i,h in enumerate(hdr)}
    return hdr,[{h:r[i] for h,i in ix.items()} for r in data if len(r)>=len(hdr)]
for fn in sys.argv[1:]:
    hdr,d=load(fn)
    stalls=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
    S='Warp Stall Sampling (All Samples)'
    tot=sum(int(x[S] or 0) for x in d)
    byexec=collections.Counter(); cnt=collections.Counter(); st=collections.defaultdict(collections.Counter)
    for x in d:
        e=int(x['Instructions Executed'] or 0); s=int(x[S] or 0)
        k=e if e in (229376,114688,32768,16384,4096,8192) else ('spin' if e>1000000 else 'other')
        byexec[k]+=s; cnt[k]+=1
        for h in stalls: st[k][h]+=int(x[h] or 0)
    print(fn,'total',tot, 'instr executed', sum(int(x['Instructions Executed'] or 0) for x in d))
    for k,v in byexec.most_common():
        top=', '.join('%s %d'%(h[6:],c) for h,c in st[k].most_common(4))
        print('  exec=%-8s instrs %5d samples %6d  (%s)'%(k,cnt[k],v,top))
