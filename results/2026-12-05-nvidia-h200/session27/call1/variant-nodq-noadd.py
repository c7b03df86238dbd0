import sys
p='/work/main/kernels-gpu/src/gpu/flash_bwd.rs'
s=open(p).read()
v=sys.argv[1]
old="""                unsafe {
                    add_tiles::<NT4, NT4>(&acc, tiles_inside, t4, |half, col| row_base(half, c0 + col))
                };"""
assert s.count(old)==1
s=s.replace(old,"""                if !WIN {
                    unsafe {
                        add_tiles::<NT4, NT4>(&acc, tiles_inside, t4, |half, col| row_base(half, c0 + col))
                    };
                }""")
if v=='nodq':
    old2="""        let mut qf = [0.0f32; 32];
        if qw {"""
    assert s.count(old2)==1
    s=s.replace(old2,"""        let mut qf = [0.0f32; 32];
        if qw && !WIN {""")
open(p,'w').write(s)
