// emu_dpi.sv — SystemVerilog declarations of libemu's DPI-C golden model
// (emu/dpi.h).  Compile this package with the testbench and link libemu:
//
//   import emu_dpi::*;
//   int h = emu_dpi_open("e4m3", "", "rne,sat");
//   if (emu_dpi_mul(h, a, b, r, fl) != 0)
//     $fatal(1, "%s", emu_dpi_last_error());
//
// Patterns are longint unsigned (formats up to 64 bits), flags int
// unsigned in TestFloat's numbering (inexact 1, underflow 2, overflow 4,
// infinite 8, invalid 16); every function returns 0, or -1 with a message
// from emu_dpi_last_error().  The names are the C names.
package emu_dpi;
  localparam int EMU_DPI_MAX_K = 256;  // as in emu/dpi.h

  typedef longint unsigned emu_pat_t;
  typedef emu_pat_t emu_vec_t[EMU_DPI_MAX_K];

  import "DPI-C" function string emu_dpi_last_error();
  import "DPI-C" function int emu_dpi_open(input string in_fmt,
                                       input string out_fmt,
                                       input string settings);
  import "DPI-C" function int emu_dpi_open_dot(input string in_fmt,
                                           input string accum,
                                           input string out_fmt,
                                           input string settings);

  import "DPI-C" function int emu_dpi_open_scaled(input string scaled,
                                              input string accum,
                                              input string out_fmt,
                                              input string settings);

  import "DPI-C" function int emu_dpi_add(input int h, input emu_pat_t a,
      input emu_pat_t b, output emu_pat_t r, output int unsigned flags);
  import "DPI-C" function int emu_dpi_sub(input int h, input emu_pat_t a,
      input emu_pat_t b, output emu_pat_t r, output int unsigned flags);
  import "DPI-C" function int emu_dpi_mul(input int h, input emu_pat_t a,
      input emu_pat_t b, output emu_pat_t r, output int unsigned flags);
  import "DPI-C" function int emu_dpi_div(input int h, input emu_pat_t a,
      input emu_pat_t b, output emu_pat_t r, output int unsigned flags);
  import "DPI-C" function int emu_dpi_sqrt(input int h, input emu_pat_t a,
      output emu_pat_t r, output int unsigned flags);
  import "DPI-C" function int emu_dpi_fma(input int h, input emu_pat_t a,
      input emu_pat_t b, input emu_pat_t c, output emu_pat_t r,
      output int unsigned flags);
  import "DPI-C" function int emu_dpi_convert(input int h, input emu_pat_t a,
      output emu_pat_t r, output int unsigned flags);
  import "DPI-C" function int emu_dpi_eq(input int h, input emu_pat_t a,
      input emu_pat_t b, output emu_pat_t r, output int unsigned flags);
  import "DPI-C" function int emu_dpi_lt(input int h, input emu_pat_t a,
      input emu_pat_t b, output emu_pat_t r, output int unsigned flags);
  import "DPI-C" function int emu_dpi_le(input int h, input emu_pat_t a,
      input emu_pat_t b, output emu_pat_t r, output int unsigned flags);
  import "DPI-C" function int emu_dpi_op(input int h, input string op,
      input emu_pat_t a, input emu_pat_t b, input emu_pat_t c,
      output emu_pat_t r, output int unsigned flags);
  // Stochastic handles ("sr", "srN"): the random word given (srN: its top
  // N bits).
  import "DPI-C" function int emu_dpi_op_word(input int h, input string op,
      input emu_pat_t a, input emu_pat_t b, input emu_pat_t c,
      input longint unsigned word, output emu_pat_t r,
      output int unsigned flags);

  // k terms from the first k entries of a and b (k <= EMU_DPI_MAX_K).
  import "DPI-C" function int emu_dpi_dot(input int h, input int k,
      input emu_vec_t a, input emu_vec_t b, input emu_pat_t c,
      output emu_pat_t r, output int unsigned flags);
  import "DPI-C" function int emu_dpi_dot4(input int h,
      input emu_pat_t a0, input emu_pat_t b0, input emu_pat_t a1,
      input emu_pat_t b1, input emu_pat_t a2, input emu_pat_t b2,
      input emu_pat_t a3, input emu_pat_t b3, input emu_pat_t c,
      output emu_pat_t r, output int unsigned flags);
  // Block-scaled (MX, NVFP4): k element codes per operand, the first
  // ceil(k / block) entries of sa and sb their scale codes, ga and gb the
  // binary32 tensor scales (ignored by formats without them).
  import "DPI-C" function int emu_dpi_dot_scaled(input int h, input int k,
      input emu_vec_t a, input emu_vec_t sa, input emu_vec_t b,
      input emu_vec_t sb, input emu_pat_t ga, input emu_pat_t gb,
      output emu_pat_t r, output int unsigned flags);
endpackage
