/* SPDX-License-Identifier: MIT */
/*
 * cli_metrics.c - `kvpool metrics`: everything STATS reports in the
 * Prometheus text exposition format (client/stats_text.c writes it; kvpoold
 * --metrics-listen serves the same text over HTTP).
 */
#include <stdlib.h>

#include "client/cli.h"
#include "client/stats_text.h"

int cmd_metrics(struct cli *cli, int argc, char **argv)
{
	kvp_ns_stats_t *ns;
	kvp_stats_t st;
	int nns, rc;

	rc = cli_no_args(cli, argc, argv, "Usage: kvpool [OPTIONS] metrics\n"
			 "Everything STATS reports, in the Prometheus text exposition\n"
			 "format: kvpool_* for the daemon, kvpool_namespace_*{namespace=...}\n"
			 "per namespace; pages by state=... and tier=\"pool\"|\"host\"|\"nvme\".\n");
	if (rc >= 0)
		return rc;
	nns = cli_snapshot(cli, "metrics", &st, &ns);
	if (nns < 0)
		return CLI_ERR;
	stats_metrics(stdout, &st, ns, nns);
	free(ns);
	return CLI_OK;
}
