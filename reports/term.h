/*
 * term.h: terminal output helpers shared by the report commands (runs,
 * history, diff): whether to write colour, the ANSI codes, and fitting text
 * that came from users or the database into one column of a table.
 *
 * Colour is written only when the stream is a terminal and NO_COLOR is not
 * set to anything (https://no-color.org; an empty value disables colour too).
 * Widths count UTF-8 code points, a good enough stand-in for terminal columns
 * for the text precgate prints (paths, labels, error messages).
 *
 * Stored text (labels, capture paths, run errors, names, messages built
 * from them) reaches a terminal only escaped, so it cannot move the cursor,
 * clear the screen, set the window title or colour the output:
 *   - a C0 control character (U+0000-U+001F, newline and tab included) or
 *     DEL is written "\xNN" (ESC as \x1b, BEL as \x07);
 *   - a C1 control character (U+0080-U+009F) is written "\u{NN}" (CSI as
 *     \u{9b});
 *   - a byte that does not start valid UTF-8 is written "\xNN" (NN >= 80,
 *     so never mistaken for a control character);
 *   - a backslash is written "\\", so every escape above is unambiguous;
 *   - everything else (valid UTF-8) as it is.
 * Each escape counts as as many columns as it has characters.
 */
#ifndef PG_TERM_H
#define PG_TERM_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* ANSI SGR sequences. */
#define TERM_RED "\033[31m"
#define TERM_GREEN "\033[32m"
#define TERM_BOLD "\033[1m"
#define TERM_RESET "\033[0m"

/* The environment variable that turns colour off whatever its value. */
#define TERM_NO_COLOR_ENV "NO_COLOR"

/* Marks text cut by term_fit. */
#define TERM_ELLIPSIS "..."

/* 1 when colour should be written to a stream: is_tty is non-zero and
 * no_color (the NO_COLOR value, NULL when the variable is unset) is NULL;
 * else 0. Pure: the CLI passes the values (cli_use_colour). */
int term_colour_wanted(int is_tty, const char *no_color);

/* Writes text to out escaped as above; NULL writes "(null)". The one way
 * stored text reaches a terminal. */
void term_put(FILE *out, const char *text);

/* Writes the one character at s (not at its NUL) escaped as above; returns
 * the bytes of s it took (>= 1). For writers with escapes of their own
 * (Markdown) that hand term the characters they do not handle. */
size_t term_put_char(FILE *out, const char *s);

/* fprintf with every %s argument written by term_put (its width and
 * precision counted in columns of the escaped text, whole escapes only);
 * the format's own text and every other conversion are written as fprintf
 * writes them. For lines that embed stored text: the format may hold the
 * newlines and colour, the arguments cannot. */
void term_printf(FILE *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* term_printf on a va_list (ap is left as it was: the function copies it). */
void term_vprintf(FILE *out, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Copies text into buf (len bytes, always NUL-terminated when len > 0)
 * escaped as above, so it is safe for one line of a terminal, and at most
 * width columns long. Longer text is cut (between whole escapes) and marked with
 * TERM_ELLIPSIS at the end (keep_tail 0: the start is kept) or at the start
 * (keep_tail 1: the end is kept, as file names live at the end of paths).
 * width 0 means no limit. NULL text gives "-". When buf is too small the
 * copy stops at the last whole code point that fits. */
void term_fit(char *buf, size_t len, const char *text, size_t width, int keep_tail);

/* The number of UTF-8 code points in text (each invalid byte counts one):
 * the columns of text that is already safe (term_fit's, or the program's
 * own). */
size_t term_width(const char *text);

/* Prints text in a field of |width| columns, right-aligned for width > 0 and
 * left-aligned for width < 0, wrapped in colour (an SGR sequence) and
 * TERM_RESET when colour is non-NULL. text is written as it is: it must be
 * term_fit's output or the program's own text, never stored text. The padding lies outside the escape
 * sequences, so columns line up with and without colour; text longer than the
 * field is printed whole. */
void term_cell(FILE *out, const char *colour, int width, const char *text);

#endif /* PG_TERM_H */
