// fp8_dot4.sv — a 4-term FP8 dot-product-accumulate unit into binary32,
// D = C + A0 B0 + A1 B1 + A2 B2 + A3 B3, built the way published
// measurements describe tensor-core units: the four products are exact,
// they and C are aligned to the largest exponent among them and truncated
// (toward zero, on their magnitudes) to W bits counting that leading bit,
// the truncated values are added exactly, and the sum is normalised and
// rounded once into binary32, to nearest-even.  That is libemu's model
// "fused,k=4,w=W,acc=binary32" (emu/accum.h); tb_hw.sv checks the two
// agree.  Combinational and synthesizable; E4M3 or E5M2 operands.
//
// Specials follow IEEE addition of the exact terms: a NaN operand, an
// inf times zero, or infinities of both signs give the canonical NaN
// 0x7FC00000; otherwise an infinity gives itself.  An exact zero sum is +0.
//
// DEFECT = 1 builds a faulty variant whose product aligner drops one bit
// (the last kept bit of each product): the testbench must catch it.
module fp8_dot4
  import fp8_pkg::*;
#(
    parameter int EBITS = 4,       // 4: E4M3, 5: E5M2
    parameter int W = 16,          // bits kept after alignment, 8..56
    parameter bit DEFECT = 1'b0
) (
    input  logic [3:0][7:0] a,  // a[i] is A_i
    input  logic [3:0][7:0] b,
    input  logic [31:0]     c,
    output logic [31:0]     d
);
  localparam int SW = W + 4;            // signed sum of five W-bit values
  localparam int LW = SW > 25 ? SW : 25; // leading-one search width
  localparam logic [31:0] QNAN = 32'h7FC00000;

  // Position of the leading one of x (0 if x is zero).
  function automatic int lead(input logic [LW-1:0] x);
    int l = 0;
    for (int i = 0; i < LW; i++)
      if (x[i]) l = i;
    return l;
  endfunction

  // floor(sig * 2^(exp - q)): sig aligned to the quantum 2^q.  The caller
  // guarantees the result fits W bits (sig's leading bit is at most the
  // largest, of weight 2^(q + W - 1)).
  function automatic logic [W-1:0] align(input logic [23:0] sig,
                                         input int exp, input int q);
    if (exp >= q) return W'((W + 24)'(sig) << (exp - q));
    if (q - exp >= 24) return '0;
    return W'((W + 24)'(sig) >> (q - exp));
  endfunction

  // binary32 C: the same fields.
  logic [7:0] ce;
  logic [22:0] cf;
  assign ce = c[30:23];
  assign cf = c[22:0];

  always_comb begin
    /* verilator lint_off UNUSEDSIGNAL */
    fp8_t ua, ub;            // snan unused: no flags from this unit
    /* verilator lint_on UNUSEDSIGNAL */
    logic [23:0] sig[5];     // [0] is C, [1..4] the products
    int exp[5];              // weight of each significand's last bit
    logic neg[5], nz[5];
    logic pinf, ninf, nan;
    logic [W-1:0] t;
    logic signed [SW-1:0] sum;
    logic [SW-1:0] mag;
    logic [SW-1:0] rem, half;
    logic [24:0] kept;
    int emax, q, l, qexp, sh;

    {pinf, ninf, nan, t, sum, mag, rem, half, kept} = '0;
    {emax, q, l, qexp, sh} = '0;
    d = '0;

    sig[0] = {ce != 0, cf};
    exp[0] = (ce == 0 ? 1 : int'(ce)) - 150;
    neg[0] = c[31];
    nan = ce == 8'hff && cf != 0;
    pinf = ce == 8'hff && cf == 0 && !c[31];
    ninf = ce == 8'hff && cf == 0 && c[31];
    for (int i = 0; i < 4; i++) begin
      ua = fp8_unpack(a[i], EBITS);
      ub = fp8_unpack(b[i], EBITS);
      sig[i+1] = 24'(ua.sig) * 24'(ub.sig);
      exp[i+1] = int'(ua.exp) + int'(ub.exp);
      neg[i+1] = ua.sign ^ ub.sign;
      if (ua.nan || ub.nan || ((ua.inf || ub.inf) && (ua.zero || ub.zero)))
        nan = 1'b1;
      else if (ua.inf || ub.inf) begin
        pinf |= !neg[i+1];
        ninf |= neg[i+1];
      end
    end
    // Specials take their own way; only finite values are aligned.
    if (ce == 8'hff) sig[0] = '0;

    // The largest leading-bit weight among the non-zero values.
    emax = -1000;
    for (int i = 0; i < 5; i++) begin
      nz[i] = sig[i] != 0;
      if (nz[i] && exp[i] + lead(LW'(sig[i])) > emax)
        emax = exp[i] + lead(LW'(sig[i]));
    end
    q = emax - W + 1;

    for (int i = 0; i < 5; i++)
      if (nz[i]) begin
        t = align(sig[i], exp[i], q);
        if (DEFECT && i > 0) t[0] = 1'b0;
        sum = neg[i] ? sum - SW'(t) : sum + SW'(t);
      end

    if (nan || (pinf && ninf)) begin
      d = QNAN;
    end else if (pinf || ninf) begin
      d = {ninf, 8'hff, 23'd0};
    end else if (sum != 0) begin
      // Round |sum| * 2^q to binary32: the quantum is 2^qexp, the larger
      // of the normal one (24 bits from the leading one) and 2^-149.
      mag = sum < 0 ? SW'(-sum) : SW'(sum);
      l = lead(LW'(mag));
      qexp = (q + l - 23 > -149) ? q + l - 23 : -149;
      sh = qexp - q;
      if (sh <= 0) begin
        kept = 25'(LW'(mag) << (-sh));
      end else if (sh > SW) begin
        kept = '0;  // less than half the smallest subnormal
      end else begin
        rem = mag & ((SW'(1) << sh) - 1'b1);
        half = SW'(1) << (sh - 1);
        kept = 25'(LW'(mag) >> sh);
        if (rem > half || (rem == half && kept[0])) kept = kept + 1'b1;
      end
      if (kept[24]) begin
        kept = kept >> 1;
        qexp = qexp + 1;
      end
      if (!kept[23])
        d = {sum < 0, 8'd0, kept[22:0]};
      else if (qexp + 150 >= 255)
        d = {sum < 0, 8'hff, 23'd0};
      else
        d = {sum < 0, 8'(qexp + 150), kept[22:0]};
    end
  end
endmodule
