# Host-only check of the prefill kernel's tensor-core index math (attention_prefill.cu): a pure-Python model
# of the PTX semantics of ldmatrix(.trans) and mma.m16n8k16 (fragment layouts as in attention_mma.cuh) runs
# the kernel's address formulas on integer data and asserts S = Q K^T, O = P V and the epilogue's staging are
# exact. No GPU needed: python3 tests/cuda/attention/mma_fragment_model.py [64|128]
import random
import sys
D = int(sys.argv[1]) if len(sys.argv) > 1 else 128
KEYS = 64
def swz(row, chunk): return row * D + ((chunk ^ (row & 7)) << 3)

def store_tile(mat, rows):  # mat[r][col] -> smem (flat) swizzled
    sm = [None] * (rows * D)
    for r in range(rows):
        for c in range(D // 8):
            for e in range(8):
                sm[swz(r, c) + e] = mat[r][c * 8 + e]
    return sm

def ldmatrix_x4(sm, addr_of_lane, trans=False):
    # returns regs[lane][j] = (lo, hi)
    regs = [[None] * 4 for _ in range(32)]
    for j in range(4):
        rows = [sm[addr_of_lane(8 * j + r):addr_of_lane(8 * j + r) + 8] for r in range(8)]  # 8x8 matrix
        for lane in range(32):
            g, t = lane // 4, lane % 4
            if not trans:
                regs[lane][j] = (rows[g][2 * t], rows[g][2 * t + 1])
            else:
                regs[lane][j] = (rows[2 * t][g], rows[2 * t + 1][g])
    return regs

def mma(c, a, b0, b1):
    # c[lane][4], a[lane][4] pairs, b0/b1[lane] pairs
    A = [[0] * 16 for _ in range(16)]
    B = [[0] * 8 for _ in range(16)]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        A[g][2*t], A[g][2*t+1] = a[lane][0]
        A[g+8][2*t], A[g+8][2*t+1] = a[lane][1]
        A[g][2*t+8], A[g][2*t+9] = a[lane][2]
        A[g+8][2*t+8], A[g+8][2*t+9] = a[lane][3]
        B[2*t][g], B[2*t+1][g] = b0[lane]
        B[2*t+8][g], B[2*t+9][g] = b1[lane]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for e in range(4):
            row = g + 8 * (e >> 1); col = 2 * t + (e & 1)
            c[lane][e] += sum(A[row][k] * B[k][col] for k in range(16))

random.seed(1)
warp = 2
Q = [[random.randint(-3, 3) for _ in range(D)] for _ in range(64)]
K = [[random.randint(-3, 3) for _ in range(D)] for _ in range(KEYS)]
V = [[random.randint(-3, 3) for _ in range(D)] for _ in range(KEYS)]
smq, smk, smv = store_tile(Q, 64), store_tile(K, KEYS), store_tile(V, KEYS)

qf = [ldmatrix_x4(smq, lambda lane, kc=kc: swz(warp * 16 + (lane & 15), kc * 2 + (lane >> 4))) for kc in range(D // 16)]
s = [[[0] * 4 for _ in range(32)] for _ in range(KEYS // 8)]  # s[nt][lane][e]
for kc in range(D // 16):
    for np_ in range(KEYS // 16):
        b = ldmatrix_x4(smk, lambda lane: swz(np_ * 16 + (lane & 7) + ((lane >> 4) << 3), kc * 2 + ((lane >> 3) & 1)))
        mma(s[2*np_], qf[kc], [x[0] for x in b], [x[1] for x in b])
        mma(s[2*np_+1], qf[kc], [x[2] for x in b], [x[3] for x in b])
# check S
for nt in range(KEYS // 8):
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for e in range(4):
            row = warp * 16 + g + 8 * (e >> 1); key = nt * 8 + 2 * t + (e & 1)
            ref = sum(Q[row][d] * K[key][d] for d in range(D))
            assert s[nt][lane][e] == ref, (nt, lane, e)
print("S ok")
# P = small ints (stand-in for probabilities), O = P V
P = [[[random.randint(-2, 2) for e in range(4)] for lane in range(32)] for nt in range(KEYS // 8)]
o = [[[0] * 4 for _ in range(32)] for _ in range(D // 8)]
for kk in range(KEYS // 16):
    pf = [[(P[2*kk][l][0], P[2*kk][l][1]), (P[2*kk][l][2], P[2*kk][l][3]), (P[2*kk+1][l][0], P[2*kk+1][l][1]),
           (P[2*kk+1][l][2], P[2*kk+1][l][3])] for l in range(32)]
    for dp in range(D // 16):
        b = ldmatrix_x4(smv, lambda lane: swz(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dp * 2 + (lane >> 4)), trans=True)
        mma(o[2*dp], pf, [x[0] for x in b], [x[1] for x in b])
        mma(o[2*dp+1], pf, [x[2] for x in b], [x[3] for x in b])
# dense P (16 x KEYS) from fragments: P[nt][lane][e] is (row g + 8(e>>1), key nt*8 + 2t + (e&1))
Pd = [[0] * KEYS for _ in range(16)]
for nt in range(KEYS // 8):
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for e in range(4):
            Pd[g + 8 * (e >> 1)][nt * 8 + 2 * t + (e & 1)] = P[nt][lane][e]
for dt in range(D // 8):
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for e in range(4):
            row = g + 8 * (e >> 1); dim = dt * 8 + 2 * t + (e & 1)
            assert o[dt][lane][e] == sum(Pd[row][k] * V[k][dim] for k in range(KEYS)), (dt, lane, e)
print("O ok")
# epilogue staging: write (row, dims) via swz(r, dt) + 2t, read back chunks
sm = [None] * (64 * D)
for dt in range(D // 8):
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for rr in range(2):
            r = warp * 16 + g + 8 * rr
            sm[swz(r, dt) + 2 * t] = (r, dt * 8 + 2 * t)
            sm[swz(r, dt) + 2 * t + 1] = (r, dt * 8 + 2 * t + 1)
for i in range(16 * (D // 8)):
    r, c = i // (D // 8), i % (D // 8)
    chunk = sm[swz(warp * 16 + r, c): swz(warp * 16 + r, c) + 8]
    assert chunk == [(warp * 16 + r, c * 8 + e) for e in range(8)], (r, c, chunk)
print("epilogue ok")
