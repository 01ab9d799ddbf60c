/*
 * term.h: terminal output helpers shared by the report commands (runs,
 * history, diff): whether to write colour, the ANSI codes, and fitting text
 * that came from users or the database into one column of a table.
 *
 * Colour is written only when the stream is a terminal and NO_COLOR is not
 * set to anything (https://no-color.org; an empty value disables colour too).
 * Widths count UTF-8 code points, a good enough stand-in for terminal columns
 * for the text precgate prints (paths, labels, error messages).
 */
#ifndef PG_TERM_H
#define PG_TERM_H

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

/* Copies text into buf (len bytes, always NUL-terminated when len > 0) made
 * safe for one line of a terminal and at most width code points long:
 * control characters (newline, tab, ESC, DEL, C1 controls) become spaces and
 * bytes that are not valid UTF-8 become '?', so database text cannot move
 * the cursor or colour the screen. Longer text is cut and marked with
 * TERM_ELLIPSIS at the end (keep_tail 0: the start is kept) or at the start
 * (keep_tail 1: the end is kept, as file names live at the end of paths).
 * width 0 means no limit. NULL text gives "-". When buf is too small the
 * copy stops at the last whole code point that fits. */
void term_fit(char *buf, size_t len, const char *text, size_t width, int keep_tail);

/* The number of UTF-8 code points in text (each invalid byte counts one). */
size_t term_width(const char *text);

/* Prints text in a field of |width| columns, right-aligned for width > 0 and
 * left-aligned for width < 0, wrapped in colour (an SGR sequence) and
 * TERM_RESET when colour is non-NULL. The padding lies outside the escape
 * sequences, so columns line up with and without colour; text longer than the
 * field is printed whole. */
void term_cell(FILE *out, const char *colour, int width, const char *text);

#endif /* PG_TERM_H */
