# Generates the TMA (cp.async.bulk) variants of nvbare_copy measured on the H200 on
# 2026-11-30 22:20-22:30 UTC (docs/benchmarks.md, "Copy-kernel variants through the TMA").
# Assemble each with `ptxas -arch=sm_90 -O3 NAME.ptx -o NAME.cubin`, run with
# `nvbare bench --device nvidia:0 --runtime-cubin NAME.cubin --copy-block 32*W
# --copy-ctas-per-sm N [--verify]`. The first run's tCkS[f] variants are gen(log2 C, S, f, 1). Thread 0 of each CTA streams 2^LOGC-byte chunks through
# S shared-memory stages (bulk load -> mbarrier -> bulk store); the other threads copy the
# head, the tail and misaligned copies. This is the second run's generator: lane 0 of each of
# W warps is a producer with its own S stages (W = 1 is the first run's single producer).
# The first run's generator kept the barrier addresses in %r20.., which with S = 16 overlapped
# the phase register %r30 and hung (t2k16f); here they live in %r100.. (w1s16c2kf ran).
import sys
def gen(LOGC, S, store_inflight=False, W=1):
    C = 1 << LOGC
    L = []
    a = L.append
    a(".version 8.0\n.target sm_90\n.address_size 64\n")
    a(".visible .entry nvbare_copy(\n\t.param .u64 nvbare_copy_param_dst,\n\t.param .u64 nvbare_copy_param_src,\n\t.param .u64 nvbare_copy_param_bytes\n)\n{")
    a("\t.reg .pred %p<40>;\n\t.reg .b16 %rs<8>;\n\t.reg .b32 %r<300>;\n\t.reg .b64 %rd<100>;")
    a("\t.shared .align 128 .b8 tbuf[%d];\n\t.shared .align 8 .b64 tbar[%d];" % (W*S*C, W*S))
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
\tsub.s64 %rd12, %rd3, %rd8;""")
    a("\tshr.u64 %%rd13, %%rd12, %d;\n\tshl.b64 %%rd14, %%rd13, %d;" % (LOGC, LOGC))
    a("""\tsub.s64 %rd15, %rd12, %rd14;
\tshr.u64 %rd16, %rd15, 4;
\tmov.u64 %rd17, %rd4;
$L_tv:
\tsetp.ge.u64 %p3, %rd17, %rd16;
\t@%p3 bra $L_tb;
\tshl.b64 %rd18, %rd17, 4;
\tadd.s64 %rd18, %rd18, %rd14;
\tadd.s64 %rd19, %rd10, %rd18;
\tld.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd19];
\tadd.s64 %rd19, %rd11, %rd18;
\tst.global.v4.u32 [%rd19], {%r5, %r6, %r7, %r8};
\tadd.s64 %rd17, %rd17, %rd5;
\tbra.uni $L_tv;
$L_tb:
\tand.b64 %rd20, %rd15, 15;
\tsetp.ge.u64 %p4, %rd4, %rd20;
\t@%p4 bra $L_bulk;
\tshl.b64 %rd21, %rd16, 4;
\tadd.s64 %rd21, %rd21, %rd14;
\tadd.s64 %rd21, %rd21, %rd4;
\tadd.s64 %rd9, %rd10, %rd21;
\tld.global.u8 %rs2, [%rd9];
\tadd.s64 %rd9, %rd11, %rd21;
\tst.global.u8 [%rd9], %rs2;
$L_bulk:
\tand.b32 %r12, %r3, 31;
\tsetp.ne.u32 %p5, %r12, 0;
\t@%p5 bra $L_done;
\tshr.u32 %r13, %r3, 5;
\tmad.lo.u32 %r14, %r1, WARPS, %r13;
\tcvt.u64.u32 %rd22, %r14;
\tsetp.ge.u64 %p6, %rd22, %rd13;
\t@%p6 bra $L_done;
\tmov.u32 %r10, tbar;
\tmov.u32 %r11, tbuf;
\tmul.lo.u32 %r15, %r13, STAGEBAR;
\tadd.u32 %r10, %r10, %r15;
\tmul.lo.u32 %r15, %r13, STAGEBUF;
\tadd.u32 %r11, %r11, %r15;""".replace("WARPS", str(W)).replace("STAGEBAR", str(8*S)).replace("STAGEBUF", str(C*S)))
    a("\tmov.u32 %%r9, %d;" % C)
    for s in range(S):
        a("\tadd.u32 %%r%d, %%r10, %d;" % (100 + s, 8 * s))
        a("\tadd.u32 %%r%d, %%r11, %d;" % (200 + s, C * s))
        a("\tmbarrier.init.shared::cta.b64 [%%r%d], 1;" % (100 + s))
    a("\tfence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;")
    a("\tmul.lo.u32 %%r16, %%r4, %d;\n" % W)
    a("\tcvt.u64.u32 %%rd23, %%r16;\n\tshl.b64 %%rd24, %%rd23, %d;\n\tshl.b64 %%rd25, %%rd22, %d;" % (LOGC, LOGC))
    a("\tmul.lo.s64 %%rd31, %%rd24, %d;" % S)
    a("\tmov.u64 %rd26, %rd25;")
    for s in range(S):
        a("\tsetp.ge.u64 %p7, %rd26, %rd14;\n\t@%p7 bra $L_pro_end;")
        a("\tmbarrier.arrive.expect_tx.shared::cta.b64 %%rd27, [%%r%d], %%r9;" % (100 + s))
        a("\tadd.s64 %rd28, %rd10, %rd26;")
        a("\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%%r%d], [%%rd28], %%r9, [%%r%d];" % (200 + s, 100 + s))
        a("\tadd.s64 %rd26, %rd26, %rd24;")
    a("$L_pro_end:\n\tmov.u64 %rd30, %rd25;\n\tmov.u32 %r30, 0;\n$L_main:")
    for s in range(S):
        a("\tsetp.ge.u64 %p8, %rd30, %rd14;\n\t@%p8 bra $L_drain;")
        a("$L_wait_%d:" % s)
        a("\tmbarrier.try_wait.parity.shared::cta.b64 %%p9, [%%r%d], %%r30;" % (100 + s))
        a("\t@!%%p9 bra $L_wait_%d;" % s)
        a("\tadd.s64 %rd32, %rd11, %rd30;")
        a("\tcp.async.bulk.global.shared::cta.bulk_group [%%rd32], [%%r%d], %%r9;" % (200 + s))
        a("\tcp.async.bulk.commit_group;")
        if not store_inflight:
            a("\tadd.s64 %rd33, %rd30, %rd31;\n\tsetp.ge.u64 %p10, %rd33, %rd14;")
            a("\t@%%p10 bra $L_skip_%d;" % s)
            a("\tcp.async.bulk.wait_group.read 0;")
            a("\tmbarrier.arrive.expect_tx.shared::cta.b64 %%rd27, [%%r%d], %%r9;" % (100 + s))
            a("\tadd.s64 %rd34, %rd10, %rd33;")
            a("\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%%r%d], [%%rd34], %%r9, [%%r%d];" % (200 + s, 100 + s))
            a("$L_skip_%d:" % s)
        else:
            # refill the previous stage (its store was issued one step earlier)
            p = (s - 1) % S
            a("\tsetp.lt.u64 %p11, %rd30, %rd24;")  # first chunk: no previous stage
            a("\t@%%p11 bra $L_skip_%d;" % s)
            a("\tsub.s64 %rd35, %rd30, %rd24;\n\tadd.s64 %rd33, %rd35, %rd31;\n\tsetp.ge.u64 %p10, %rd33, %rd14;")
            a("\t@%%p10 bra $L_skip_%d;" % s)
            a("\tcp.async.bulk.wait_group.read 1;")
            a("\tmbarrier.arrive.expect_tx.shared::cta.b64 %%rd27, [%%r%d], %%r9;" % (100 + p))
            a("\tadd.s64 %rd34, %rd10, %rd33;")
            a("\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%%r%d], [%%rd34], %%r9, [%%r%d];" % (200 + p, 100 + p))
            a("$L_skip_%d:" % s)
        a("\tadd.s64 %rd30, %rd30, %rd24;")
    a("\txor.b32 %r30, %r30, 1;\n\tbra.uni $L_main;")
    a("""$L_drain:
\tcp.async.bulk.wait_group 0;
$L_done:
\tret;
$L_bytes:
\tmov.u64 %rd14, %rd4;
$L_byte:
\tsetp.ge.u64 %p12, %rd14, %rd3;
\t@%p12 bra $L_done;
\tadd.s64 %rd15, %rd2, %rd14;
\tld.global.u8 %rs3, [%rd15];
\tadd.s64 %rd15, %rd1, %rd14;
\tst.global.u8 [%rd15], %rs3;
\tadd.s64 %rd14, %rd14, %rd5;
\tbra.uni $L_byte;
}""")
    return "\n".join(L) + "\n"
V = [("w4s4c2k", 11, 4, False, 4), ("w4s2c4k", 12, 2, False, 4), ("w8s2c2k", 11, 2, False, 8),
     ("w2s4c4k", 12, 4, False, 2), ("w4s8c1k", 10, 8, False, 4), ("w8s4c1k", 10, 4, False, 8),
     ("w4s4c2kf", 11, 4, True, 4), ("w1s8c4k", 12, 8, False, 1), ("w1s16c2kf", 11, 16, True, 1)]
for name, lc, s, f, w in V:
    open(name + ".ptx", "w").write(gen(lc, s, f, w))
