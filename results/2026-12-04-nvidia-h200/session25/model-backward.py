import heapq
def sched(L,F,slots):
    t=[0.0]*slots; heapq.heapify(t)
    for l in L:
        s=heapq.heappop(t); heapq.heappush(t,s+l+F)
    return max(t)
def pairlens(N,w,BN=128,BM=64):
    return [ (min(N,b*BN+BN+w)-b*BN+BM-1)//BM for b in range(N//BN)]
def order(pairs,per,G):
    L=[]
    for g0 in range(0,pairs,G):
        gp=min(G,pairs-g0)
        for x in range(len(per)):
            L+= [per[x]]*gp
    return L
for (N,P,w,BN,slots) in ((16384,16,10**9,128,132),(8192,32,10**9,128,132),(4096,64,10**9,128,132),(2048,128,10**9,128,132),(1024,256,10**9,128,132),(16384,16,1024,128,132),(16384,16,4096,128,132),
   (16384,32,10**9,64,396),(4096,128,10**9,64,396),(1024,512,10**9,64,396)):
    per=pairlens(N,w,BN)
    r=[]
    for G in (1,8,16,32,P):
        r.append(sched(order(P,per,G),1.5,slots))
    print(N,P,w if w<10**9 else 'causal',BN,' '.join('G%d:%+.1f%%'%(G,100*(x/r[0]-1)) for G,x in zip((1,8,16,32,P),r)))
print('d256 BN64 H8')
for N in (1024,2048,4096,8192,16384):
    P=8*16384//N; per=pairlens(N,10**9,64)
    G=max(g for g in range(1,17) if P%g==0)
    a=sched(order(P,per,1),1.5,132); b=sched(order(P,per,G),1.5,132)
    print(N,P,G,'%+.1f%%'%(100*(b/a-1)))
