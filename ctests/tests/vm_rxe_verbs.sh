#!/bin/bash
# harness-timeout: 400
# Our rxe provider (providers/rxe, build/lib/libibverbs/librxe-rs-rdmav34.so)
# on the verbs Debian's programs leave out, in the VM of ctests/vm with the
# kernel's rxe0: ctests/vm/rxe_verbs.py drives them through pyverbs
# (ibv_post_send lists with inline data and several SGEs, the ibv_wr_* API
# with inline data lists and SGE lists, RDMA and atomics, extended CQ
# polling across many batches, CQ resize, SRQ resize and limit). Every case
# must pass over ours; the same cases over Debian's C provider under our
# libibverbs (RDMAV_C_PROVIDERS=rxe) are printed for reference only: its
# ibv_wr_set_inline_data_list sends no data (rdma-core 44's rxe.c never
# adds the buffers' lengths up), so its wr_api case fails.
# Skipped when QEMU is missing, as ctests/tests/vm_kernel_devices.sh.
set -uo pipefail
. "$(dirname "$0")/lib/vm.sh"
unset LD_LIBRARY_PATH LD_PRELOAD IBV_CONFIG_DIR RDMAV_DRIVERS IBV_DRIVERS RDMAV_C_PROVIDERS
[[ -f $BUILD/lib/libibverbs/librxe-rs-rdmav34.so ]] ||
	fail "no $BUILD/lib/libibverbs/librxe-rs-rdmav34.so: run make first"

vm_image

# In the guest: the RoCEv2 GID of rxe0's address, then the cases over ours
# and over the C provider, each line prefixed with the provider.
guest='
export LD_LIBRARY_PATH=$RSV_BUILD/lib
ulimit -l unlimited
g=
for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
	[[ $(<"$f") == 0000:0000:0000:0000:0000:ffff:0a00:0001 ]] && { g=${f##*/}; break; }
done
[[ -n $g ]] || { echo "rxe0 has no GID for 10.0.0.1"; exit 1; }
echo "gid index $g"
timeout 150 env -u RDMAV_C_PROVIDERS python3 /srv/rxe-vm/rxe_verbs.py rxe0 "$g" 2>&1 | sed "s/^/rust: /"
timeout 100 env RDMAV_C_PROVIDERS=rxe python3 /srv/rxe-vm/rxe_verbs.py rxe0 "$g" 2>&1 | sed "s/^/c: /"
true
'
vm_run -t 330 -s "$vm:/srv/rxe-vm" -- "$guest"
((vmrc == 0)) || { cat "$work/err"; fail "run-in-vm.sh exit $vmrc"; }
ok=$(grep -c '^rust: ok ' "$work/out")
bad=$(grep '^rust: ' "$work/out" | grep -v '^rust: ok ')
[[ -z $bad ]] || fail "over our rxe provider: $bad"
((ok >= 5)) || fail "only $ok cases passed over our rxe provider"
echo "ok: $ok cases over our rxe provider; Debian's C provider: $(grep -c '^c: ok ' "$work/out") ok"
