/* Built by test_install.sh against the installed headers and libraries
 * (flags from pkg-config): lists the devices and prints how many there are. */
#include <stdio.h>
#include <infiniband/verbs.h>

int main(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (!list) {
		perror("ibv_get_device_list");
		return 1;
	}
	for (int i = 0; i < n; i++)
		printf("device %d: %s\n", i, ibv_get_device_name(list[i]));
	ibv_free_device_list(list);
	printf("devices: %d\n", n);
	return 0;
}
