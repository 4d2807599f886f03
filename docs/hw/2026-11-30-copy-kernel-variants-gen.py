# Generates the copy-kernel variants of docs/hw/2026-11-30-copy-kernel-variants.txt (an experiment, not
# used by nvbare): python3 this.py writes chunk{1,2,4,8}.ptx and *cs.ptx; build each with
# `ptxas -arch=sm_90 X.ptx -o X.cubin` and try it with `nvbare bench --runtime-cubin X.cubin`.
# The load-hint variants (second run in the .txt) are runtime.ptx (.target sm_90) with every
# `ld.global.v4.u32` replaced, e.g. sed "s/ld\.global\.v4\.u32/ld.global.L2::128B.v4.u32/g".
import sys
def gen(K, ld_hint="", st_hint=""):
    L = []
    a = L.append
    a(".version 8.0\n.target sm_90\n.address_size 64\n")
    a(".visible .entry nvbare_copy(\n\t.param .u64 nvbare_copy_param_dst,\n\t.param .u64 nvbare_copy_param_src,\n\t.param .u64 nvbare_copy_param_bytes\n)\n{")
    a("\t.reg .pred %%p<16>;\n\t.reg .b16 %%rs<4>;\n\t.reg .b32 %%r<%d>;\n\t.reg .b64 %%rd<%d>;" % (8 + 4*K, 64 + 4*K))
    a("""\tld.param.u64 %rd1, [nvbare_copy_param_dst];
\tld.param.u64 %rd2, [nvbare_copy_param_src];
\tld.param.u64 %rd3, [nvbare_copy_param_bytes];
\tcvta.to.global.u64 %rd1, %rd1;
\tcvta.to.global.u64 %rd2, %rd2;
\tmov.u32 %r1, %ctaid.x;
\tmov.u32 %r2, %ntid.x;
\tmov.u32 %r3, %tid.x;
\tmov.u32 %r4, %nctaid.x;
\tmul.wide.u32 %rd4, %r1, %r2;
\tcvt.u64.u32 %rd6, %r3;
\tadd.s64 %rd4, %rd4, %rd6;
\tmul.wide.u32 %rd5, %r4, %r2;
\txor.b64 %rd7, %rd1, %rd2;
\tand.b64 %rd7, %rd7, 15;
\tsetp.ne.s64 %p1, %rd7, 0;
\t@%p1 bra $L_bytes;
\tneg.s64 %rd8, %rd2;
\tand.b64 %rd8, %rd8, 15;
\tmin.u64 %rd8, %rd8, %rd3;
\tsetp.ge.u64 %p2, %rd4, %rd8;
\t@%p2 bra $L_body;
\tadd.s64 %rd9, %rd2, %rd4;
\tld.global.u8 %rs1, [%rd9];
\tadd.s64 %rd9, %rd1, %rd4;
\tst.global.u8 [%rd9], %rs1;
$L_body:
\tadd.s64 %rd10, %rd2, %rd8;
\tadd.s64 %rd11, %rd1, %rd8;
\tsub.s64 %rd12, %rd3, %rd8;
\tshr.u64 %rd13, %rd12, 4;
\tcvt.u64.u32 %rd30, %r2;""")
    a("\tmul.lo.s64 %%rd31, %%rd30, %d;\t// chunk = K*B vectors" % K)
    a("""\tcvt.u64.u32 %rd32, %r1;
\tmul.lo.s64 %rd33, %rd32, %rd31;\t// base = ctaid * chunk
\tcvt.u64.u32 %rd34, %r4;
\tmul.lo.s64 %rd35, %rd34, %rd31;\t// step = nctaid * chunk
\tshl.b64 %rd36, %rd30, 4;\t// 16 B bytes between a thread's vectors
$L_chunk:
\tsetp.ge.u64 %p3, %rd33, %rd13;
\t@%p3 bra $L_tail;
\tadd.s64 %rd37, %rd33, %rd6;\t// i0 = base + tid
\tshl.b64 %rd38, %rd37, 4;
\tadd.s64 %rd39, %rd10, %rd38;\t// src of i0
\tadd.s64 %rd40, %rd11, %rd38;\t// dst of i0
\tadd.s64 %rd41, %rd33, %rd31;
\tsetp.gt.u64 %p4, %rd41, %rd13;
\t@%p4 bra $L_partial;""")
    # full chunk
    for k in range(K):
        src = "%rd39" if k == 0 else "%%rd%d" % (42 + k)
        if k > 0:
            prev = "%rd39" if k == 1 else "%%rd%d" % (41 + k)
            a("\tadd.s64 %s, %s, %%rd36;" % (src, prev))
        r = 5 + 4*k
        a("\tld.global%s.v4.u32 {%%r%d, %%r%d, %%r%d, %%r%d}, [%s];" % (ld_hint, r, r+1, r+2, r+3, src))
    for k in range(K):
        dstr = "%rd40" if k == 0 else "%%rd%d" % (42 + K + k)
        if k > 0:
            prev = "%rd40" if k == 1 else "%%rd%d" % (41 + K + k)
            a("\tadd.s64 %s, %s, %%rd36;" % (dstr, prev))
        r = 5 + 4*k
        a("\tst.global%s.v4.u32 [%s], {%%r%d, %%r%d, %%r%d, %%r%d};" % (st_hint, dstr, r, r+1, r+2, r+3))
    a("\tadd.s64 %rd33, %rd33, %rd35;\n\tbra.uni $L_chunk;")
    # partial: one at a time
    a("""$L_partial:
\tmov.u64 %rd60, %rd37;
$L_pone:
\tsetp.ge.u64 %p5, %rd60, %rd13;
\t@%p5 bra $L_pnext;
\tsetp.ge.u64 %p6, %rd60, %rd41;
\t@%p6 bra $L_pnext;
\tshl.b64 %rd61, %rd60, 4;
\tadd.s64 %rd62, %rd10, %rd61;
\tld.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd62];
\tadd.s64 %rd62, %rd11, %rd61;
\tst.global.v4.u32 [%rd62], {%r5, %r6, %r7, %r8};
\tadd.s64 %rd60, %rd60, %rd30;
\tbra.uni $L_pone;
$L_pnext:
\tadd.s64 %rd33, %rd33, %rd35;
\tbra.uni $L_chunk;
$L_tail:
\tand.b64 %rd27, %rd12, 15;
\tsetp.ge.u64 %p7, %rd4, %rd27;
\t@%p7 bra $L_done;
\tshl.b64 %rd28, %rd13, 4;
\tadd.s64 %rd28, %rd28, %rd4;
\tadd.s64 %rd29, %rd10, %rd28;
\tld.global.u8 %rs2, [%rd29];
\tadd.s64 %rd29, %rd11, %rd28;
\tst.global.u8 [%rd29], %rs2;
$L_done:
\tret;
$L_bytes:
\tmov.u64 %rd14, %rd4;
$L_byte:
\tsetp.ge.u64 %p8, %rd14, %rd3;
\t@%p8 bra $L_done;
\tadd.s64 %rd15, %rd2, %rd14;
\tld.global.u8 %rs3, [%rd15];
\tadd.s64 %rd15, %rd1, %rd14;
\tst.global.u8 [%rd15], %rs3;
\tadd.s64 %rd14, %rd14, %rd5;
\tbra.uni $L_byte;
}""")
    return "\n".join(L) + "\n"
for name, K, lh, sh in [("chunk1", 1, "", ""), ("chunk2", 2, "", ""), ("chunk4", 4, "", ""), ("chunk8", 8, "", ""), ("chunk4cs", 4, ".cs", ".cs"), ("chunk1cs", 1, ".cs", ".cs")]:
    open(name + ".ptx", "w").write(gen(K, lh, sh))
