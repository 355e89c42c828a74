/* Built by test_install.sh: proves librdmacm's header and library are
 * installed and usable (an event channel is a plain file descriptor). */
#include <stdio.h>
#include <rdma/rdma_cma.h>

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	if (!ch) {
		perror("rdma_create_event_channel");
		return 1;
	}
	printf("event channel fd: %d\n", ch->fd);
	rdma_destroy_event_channel(ch);
	printf("rdma_cm: ok\n");
	return 0;
}
