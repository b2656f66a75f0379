/* SPDX-License-Identifier: MIT */
/*
 * fake_redis.c - a scripted, hostile Redis node (see fake_redis.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "fake_redis.h"
#include "harness.h"

#define MAX_CONNS	32
#define MAX_ARGS	8

struct fconn {
	int fd;
	char *buf;
	size_t len, cap;
};

static FILE *logf_;

/* say() - one line into the log. */
static void say(const char *line)
{
	fprintf(logf_, "%s\n", line);
	fflush(logf_);
}

static void send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			return;
		}
		p += w;
		n -= (size_t)w;
	}
}

static void send_str(int fd, const char *s)
{
	if (s)
		send_all(fd, s, strlen(s));
}

/* parse() - one command "*N\r\n$L\r\nARG\r\n..." at the start of c's
 * buffer: its argument count and arguments (pointers into the buffer),
 * and the bytes it takes; 0 when it is not whole yet, -1 when it is not
 * RESP. */
static long parse(const struct fconn *c, const char **argv, size_t *argl, int *argc)
{
	const char *p = c->buf, *end = c->buf + c->len, *nl;
	long n, i, l;

	if (p == end)
		return 0;
	if (*p != '*')
		return -1;
	nl = memchr(p, '\n', (size_t)(end - p));
	if (!nl)
		return 0;
	n = strtol(p + 1, NULL, 10);
	p = nl + 1;
	*argc = 0;
	for (i = 0; i < n; i++) {
		if (p >= end)
			return 0;
		if (*p != '$')
			return -1;
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			return 0;
		l = strtol(p + 1, NULL, 10);
		p = nl + 1;
		if (end - p < l + 2)
			return 0;
		if (*argc < MAX_ARGS) {
			argv[*argc] = p;
			argl[(*argc)++] = (size_t)l;
		}
		p += l + 2;
	}
	return p - c->buf;
}

static bool is(const char *a, size_t l, const char *word)
{
	return l == strlen(word) && !strncasecmp(a, word, l);
}

static void answer(int fd, const struct fake_script *s, const char **argv, size_t *argl,
		   int argc, unsigned *slots_asked)
{
	char line[160];

	snprintf(line, sizeof(line), "%.*s%s%.*s", (int)(argl[0] > 40 ? 40 : argl[0]), argv[0],
		 argc > 1 ? " " : "", argc > 1 ? (int)(argl[1] > 80 ? 80 : argl[1]) : 0,
		 argc > 1 ? argv[1] : "");
	for (char *q = line; *q; q++)
		if (*q >= 'a' && *q <= 'z' && q < line + argl[0])
			*q = (char)(*q - 'a' + 'A');
	say(line);
	if (is(argv[0], argl[0], "AUTH") || is(argv[0], argl[0], "SELECT") ||
	    is(argv[0], argl[0], "ASKING") || is(argv[0], argl[0], "SET")) {
		send_str(fd, "+OK\r\n");
	} else if (is(argv[0], argl[0], "PING")) {
		send_str(fd, "+PONG\r\n");
	} else if (is(argv[0], argl[0], "INFO")) {
		char b[96];
		int n = snprintf(b, sizeof(b), "# Cluster\r\ncluster_enabled:%d\r\n",
				 s->slots ? 1 : 0);

		snprintf(line, sizeof(line), "$%d\r\n", n);
		send_str(fd, line);
		send_str(fd, b);
		send_str(fd, "\r\n");
	} else if (is(argv[0], argl[0], "CLUSTER") && argc > 1 &&
		   is(argv[1], argl[1], "SLOTS")) {
		if (!s->slots)
			send_str(fd, "-ERR This instance has cluster support disabled\r\n");
		else if ((*slots_asked)++ && s->slots_later)
			send_all(fd, s->slots_later, s->slots_later_len ? s->slots_later_len
								    : strlen(s->slots_later));
		else
			send_str(fd, s->slots);
	} else if (is(argv[0], argl[0], "GET")) {
		send_str(fd, s->get ? s->get : "$-1\r\n");
		send_str(fd, s->after_get);
	} else {
		send_str(fd, "-ERR unknown command\r\n");
	}
}

static void serve(int lfd, const struct fake_script *s)
{
	struct fconn c[MAX_CONNS];
	struct pollfd pf[MAX_CONNS + 1];
	unsigned n = 0, i, slots_asked = 0;

	memset(c, 0, sizeof(c));
	for (;;) {
		pf[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (i = 0; i < n; i++)
			pf[i + 1] = (struct pollfd){ .fd = c[i].fd, .events = POLLIN };
		if (poll(pf, n + 1, -1) < 0)
			continue;
		if ((pf[0].revents & POLLIN) && n < MAX_CONNS) {
			int fd = accept(lfd, NULL, NULL);

			if (fd >= 0) {
				c[n] = (struct fconn){ .fd = fd };
				n++;
				say("CONNECT");
				send_str(fd, s->greeting);
			}
		}
		for (i = 0; i < n; i++) {
			const char *argv[MAX_ARGS];
			size_t argl[MAX_ARGS];
			int argc;
			ssize_t r;
			long used;

			if (!(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) || pf[i + 1].fd != c[i].fd)
				continue;
			if (c[i].cap - c[i].len < 65536) {
				c[i].cap = c[i].cap * 2 + 65536;
				c[i].buf = realloc(c[i].buf, c[i].cap);
				if (!c[i].buf)
					_exit(3);
			}
			r = read(c[i].fd, c[i].buf + c[i].len, c[i].cap - c[i].len);
			if (r <= 0) {
				say("CLOSE");
				close(c[i].fd);
				free(c[i].buf);
				c[i] = c[--n];
				i--;
				continue;
			}
			c[i].len += (size_t)r;
			while ((used = parse(&c[i], argv, argl, &argc)) > 0) {
				if (argc)
					answer(c[i].fd, s, argv, argl, argc, &slots_asked);
				memmove(c[i].buf, c[i].buf + used, c[i].len - (size_t)used);
				c[i].len -= (size_t)used;
			}
		}
	}
}

void fake_listen(struct fake_redis *f, const char *dir)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int one = 1;

	memset(f, 0, sizeof(*f));
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(f->lfd, 0);
	setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ck_assert_int_gt(harness_bind_loopback(f->lfd, &a), 0);
	ck_assert_int_eq(listen(f->lfd, 64), 0);
	ck_assert_int_eq(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
	f->port = ntohs(a.sin_port);
	snprintf(f->log, sizeof(f->log), "%s/fake-%u.log", dir, f->port);
}

void fake_run(struct fake_redis *f, const struct fake_script *s)
{
	fflush(NULL);
	f->pid = fork();
	ck_assert_int_ge(f->pid, 0);
	if (f->pid == 0) {
		signal(SIGPIPE, SIG_IGN);
		logf_ = fopen(f->log, "w");
		if (!logf_)
			_exit(2);
		serve(f->lfd, s);
		_exit(0);
	}
	close(f->lfd);
	f->lfd = -1;
}

void fake_stop(struct fake_redis *f)
{
	if (f->pid > 0) {
		kill(f->pid, SIGKILL);
		waitpid(f->pid, NULL, 0);
	}
	f->pid = 0;
	if (f->lfd >= 0)
		close(f->lfd);
	f->lfd = -1;
}

unsigned fake_count(const struct fake_redis *f, const char *prefix)
{
	char line[256];
	unsigned n = 0;
	FILE *in = fopen(f->log, "r");

	if (!in)
		return 0;
	while (fgets(line, sizeof(line), in))
		n += !strncmp(line, prefix, strlen(prefix));
	fclose(in);
	return n;
}

const char *fake_slots_all(char *buf, size_t len, const char *host, uint16_t port)
{
	snprintf(buf, len, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$%zu\r\n%s\r\n:%u\r\n",
		 strlen(host), host, port);
	return buf;
}
