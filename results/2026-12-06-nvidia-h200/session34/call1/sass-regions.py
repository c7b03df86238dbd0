import csv,sys
exec(open(__file__.replace('sass-regions.py','sass-stalls.py')).read().split('hdr,d=load')[0])
hdr,d=load(sys.argv[1])
stalls=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
tot=sum(int(x['Warp Stall Sampling (All Samples)'] or 0) for x in d)
# contiguous runs of same exec count
runs=[]
for i,x in enumerate(d):
    e=int(x['Instructions Executed'] or 0); s=int(x['Warp Stall Sampling (All Samples)'] or 0)
    if runs and runs[-1]['e']==e: runs[-1]['s']+=s; runs[-1]['n']+=1; runs[-1]['last']=i
    else: runs.append(dict(e=e,s=s,n=1,first=i,last=i))
for r in runs:
    if 100*r['s']/tot<0.3: continue
    seg=d[r['first']:r['last']+1]
    agg={k:sum(int(x[k] or 0) for x in seg) for k in stalls}
    top=sorted(agg.items(),key=lambda a:-a[1])[:3]
    print('%5.1f%% exec=%-9d n=%-4d [%d..%d] %s | %s'%(100*r['s']/tot,r['e'],r['n'],r['first'],r['last'],' '.join('%s:%.1f'%(k[6:],100*v/tot) for k,v in top), seg[0]['Source'][:50]))
