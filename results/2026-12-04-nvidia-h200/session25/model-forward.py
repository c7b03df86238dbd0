import heapq
def sched(L,F,slots):
    t=[0.0]*slots; heapq.heapify(t)
    for l in L:
        s=heapq.heappop(t); heapq.heappush(t,s+l+F)
    return max(t)
def order(P,per,G):
    L=[]
    for g0 in range(0,P,G):
        for x in range(len(per)): L+=[per[x]]*min(G,P-g0)
    return L
for N,B,H,bm,bn in ((1024,16,16,128,128),(2048,8,16,128,128),(4096,4,16,128,128),(8192,2,16,128,128),(1024,16,32,128,128),(2048,8,32,192,128),(4096,4,32,192,128),(1024,16,8,128,80),(2048,8,8,128,80),(4096,4,8,128,80)):
    T=-(-N//bm)
    per=sorted([ -(-min(N,t*bm+bm)//bn) for t in range(T)],reverse=True)
    P=B*H
    r=[sched(order(P,per,G),0.7,132) for G in (1,4,8,16,P)]
    print(N,B,H,bm,bn,' '.join('G%d:%+.1f%%'%(G,100*(x/r[0]-1)) for G,x in zip((1,4,8,16,P),r)))
print('---')
for d,H,bm,bn in ((64,32,128,128),(64,32,192,128),(128,16,128,128),(256,8,128,80)):
  out=[]
  for N in (1024,2048,4096,8192,16384):
    B=16384//N; T=-(-N//bm)
    per=sorted([ -(-min(N,t*bm+bm)//bn) for t in range(T)],reverse=True)
    P=B*H; G=max(g for g in range(1,17) if P%g==0)
    r=[sched(order(P,per,x),0.7,132) for x in (1,G)]
    out.append('%d:%+.1f%%'%(N,100*(r[1]/r[0]-1)))
  print(d,bm,bn,' '.join(out))
