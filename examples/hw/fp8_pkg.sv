// fp8_pkg.sv — the fields of an FP8 operand, shared by fp8_mul and
// fp8_dot4: E4M3 (OCP: no infinity, NaN only at S.1111.111) or E5M2
// (IEEE-like), chosen by the exponent width.
package fp8_pkg;
  typedef struct packed {
    logic sign, zero, inf, nan;
    logic snan;              // E5M2 NaN with the quiet bit clear
    logic [3:0] sig;         // significand with its hidden bit
    logic signed [7:0] exp;  // weight of its last bit: value = sig * 2^exp
  } fp8_t;

  function automatic fp8_t fp8_unpack(input logic [7:0] x, input int ebits);
    fp8_t o;
    int mbits, bias, e, f, eones;
    bit fn;
    // Assigned, not initialised in the declarations: Verilator 5.006
    // evaluates such initialisers once, not per call.
    mbits = 7 - ebits;
    bias = (1 << (ebits - 1)) - 1;
    e = int'(x[6:0]) >> mbits;
    f = int'(x[6:0]) & ((1 << mbits) - 1);
    eones = (1 << ebits) - 1;
    fn = ebits == 4;
    o.sign = x[7];
    o.zero = e == 0 && f == 0;
    o.nan = fn ? (e == eones && f == (1 << mbits) - 1) : (e == eones && f != 0);
    o.inf = !fn && e == eones && f == 0;
    o.snan = !fn && o.nan && f < (1 << (mbits - 1));
    o.sig = 4'((e != 0 ? 1 << mbits : 0) | f);
    o.exp = 8'((e == 0 ? 1 : e) - bias - mbits);
    return o;
  endfunction
endpackage
