// fp8_mul.sv — an FP8 multiplier, E4M3 (OCP, no infinities) or E5M2
// (IEEE-like), rounding to nearest-even, with optional saturation.
// Written for libemu's examples: the unit a testbench checks against the
// golden model (tb_hw.sv), combinational and synthesizable.
//
// Results follow libemu's definitions of the formats: NaN results are the
// canonical NaN (E4M3 0x7F, E5M2 0x7E); an E5M2 NaN with the quiet bit
// clear is signalling and raises invalid; tininess is detected after
// rounding.  Overflow gives ±max with SAT, otherwise ±inf (E5M2) or NaN
// (E4M3, which has no infinity); with SAT an infinite result (inf times a
// number) is ±max too, as OCP's saturation mode maps infinities.  Flags in TestFloat's numbering:
// {invalid, infinite, overflow, underflow, inexact}.
//
// DEFECT = 1 builds a faulty variant that truncates instead of rounding to
// nearest-even: the test proves the testbench catches it.
module fp8_mul
  import fp8_pkg::*;
#(
    parameter int EBITS = 4,      // 4: E4M3 (bias 7), 5: E5M2 (bias 15)
    parameter bit SAT = 1'b0,
    parameter bit DEFECT = 1'b0
) (
    input  logic [7:0] a,
    input  logic [7:0] b,
    output logic [7:0] y,
    output logic [4:0] flags
);
  localparam int MBITS = 7 - EBITS;
  localparam bit FN = (EBITS == 4);               // E4M3: finite + NaN
  localparam int BIAS = (1 << (EBITS - 1)) - 1;
  localparam int EMIN = 1 - BIAS;                 // exponent of 2^emin
  localparam int PW = 2 * (MBITS + 1);            // product significand bits
  localparam logic [EBITS-1:0] EONES = '1;
  localparam logic [MBITS-1:0] MONES = '1;
  // Largest finite pattern without the sign, and the canonical NaN.
  localparam logic [6:0] MAXP = FN ? {EONES, MONES - 1'b1}
                                   : {EONES - 1'b1, MONES};
  localparam logic [7:0] QNAN = FN ? 8'h7F : {1'b0, EONES, 1'b1, {(MBITS-1){1'b0}}};

  // Position of the leading one of a non-zero product significand.
  function automatic int lead(input logic [PW-1:0] p);
    int l = 0;
    for (int i = 0; i < PW; i++)
      if (p[i]) l = i;
    return l;
  endfunction

  // {inexact, p / 2^sh rounded to nearest-even (truncated if trunc)},
  // sh >= 1.
  function automatic logic [PW+1:0] shift_round(input logic [PW-1:0] p,
                                                input int sh, input bit trunc);
    logic [PW-1:0] rem, half, kept;
    if (sh > PW)
      return {p != 0, (PW + 1)'(0)};  // below half a quantum
    kept = p >> sh;
    rem = p & ((PW'(1) << sh) - 1'b1);
    half = PW'(1) << (sh - 1);
    return {rem != 0, (PW + 1)'(kept) +
            (PW + 1)'(!trunc && (rem > half || (rem == half && kept[0])))};
  endfunction

  always_comb begin
    fp8_t ua, ub;
    logic sign, tiny, inexact, any_nan;
    logic [PW-1:0] p;
    logic [PW+1:0] rounded, fine;
    logic [PW+MBITS:0] kept;  // room for a left shift of subnormal inputs
    int l, e, q, sh, mag;

    ua = fp8_unpack(a, EBITS);
    ub = fp8_unpack(b, EBITS);
    sign = ua.sign ^ ub.sign;
    p = PW'(ua.sig) * PW'(ub.sig);
    flags = '0;
    y = '0;
    {l, e, q, sh, mag} = '0;
    {tiny, inexact, rounded, fine, kept} = '0;

    any_nan = ua.nan | ub.nan;
    if (any_nan || ((ua.inf || ub.inf) && (ua.zero || ub.zero))) begin
      // Invalid: a signalling NaN operand, or inf * 0.
      y = QNAN;
      flags[4] = ua.snan | ub.snan | ~any_nan;
    end else if (ua.inf || ub.inf) begin
      // Saturation is OCP's saturation mode: an infinite result is ±max
      // too (exact, so no flag).
      y = SAT ? {sign, MAXP} : {sign, EONES, {MBITS{1'b0}}};
    end else if (p == 0) begin
      y = {sign, 7'd0};
    end else begin
      // value = p * 2^(ua.exp + ub.exp); its leading bit weighs 2^e, and
      // the result's quantum is 2^q, q = max(e, EMIN) - MBITS.
      l = lead(p);
      e = int'(ua.exp) + int'(ub.exp) + l;
      q = ((e > EMIN) ? e : EMIN) - MBITS;
      sh = q - (int'(ua.exp) + int'(ub.exp));  // bits rounded off
      if (sh <= 0) begin
        kept = (PW + MBITS + 1)'(p) << (-sh);
      end else begin
        rounded = shift_round(p, sh, DEFECT);
        inexact = rounded[PW+1];
        kept = (PW + MBITS + 1)'(rounded[PW:0]);
      end
      if (kept[MBITS+1]) begin  // carried into the next binade
        kept = kept >> 1;
        q = q + 1;
      end
      // Tininess after rounding: below 2^EMIN once rounded to MBITS+1
      // bits with an unbounded exponent.  Only e = EMIN-1 needs that
      // rounding (one bit finer than the subnormal quantum).
      if (e >= EMIN) begin
        tiny = 1'b0;
      end else if (e < EMIN - 1 || sh <= 1) begin
        tiny = 1'b1;
      end else begin
        fine = shift_round(p, sh - 1, 1'b0);
        tiny = !fine[MBITS+1];
      end
      flags[0] = inexact;
      flags[1] = tiny && inexact;
      mag = (q + MBITS + BIAS) * (1 << MBITS) + int'(kept[MBITS-1:0]);
      if (kept[MBITS] && mag > int'(MAXP)) begin
        flags[2] = 1'b1;
        flags[0] = 1'b1;
        y = SAT ? {sign, MAXP} : FN ? QNAN : {sign, EONES, {MBITS{1'b0}}};
      end else if (kept[MBITS]) begin
        y = {sign, EBITS'(q + MBITS + BIAS), kept[MBITS-1:0]};
      end else begin
        y = {sign, {EBITS{1'b0}}, kept[MBITS-1:0]};
      end
    end
  end
endmodule
