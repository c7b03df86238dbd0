import csv,sys
def load(fn):
    rows=list(csv.reader(open(fn)))
    hdr=rows[1]; data=rows[2:]
    ix={h:i for i,h in enumerate(hdr)}
    out=[]
    for r in data:
        if len(r)<len(hdr): continue
        d={h:r[i] for h,i in ix.items()}
        out.append(d)
    return hdr,out
hdr,d=load(sys.argv[1])
stalls=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
tot=sum(int(x['Warp Stall Sampling (All Samples)'] or 0) for x in d)
print('total samples',tot)
agg={s:sum(int(x[s] or 0) for x in d) for s in stalls}
for s,v in sorted(agg.items(),key=lambda a:-a[1])[:10]: print('  %-25s %5.1f%%'%(s,100*v/tot))
top=sorted(d,key=lambda x:-int(x['Warp Stall Sampling (All Samples)'] or 0))[:int(sys.argv[2]) if len(sys.argv)>2 else 25]
for x in top:
    s=int(x['Warp Stall Sampling (All Samples)'] or 0)
    main=max(stalls,key=lambda k:int(x[k] or 0))
    print('%5.1f%% %s %-60s exec=%s %s'%(100*s/tot,x['Address'],x['Source'][:60],x['Instructions Executed'],main))
