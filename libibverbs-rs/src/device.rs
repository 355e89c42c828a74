//! The device list: discovery through the providers, the `ibv_device`
//! objects we hand out, and their names, GUIDs and indexes.
//!
//! Every `ibv_device` we return is the first field of a [`Device`] that is
//! never freed, so a pointer from any earlier list stays valid for the life
//! of the process, as programs expect. A device found again by a later
//! `ibv_get_device_list` (same provider, same name) keeps its object.
//!
//! Open contexts are recorded with their provider; every verb finds the
//! provider behind an object through its context in that record.

use core::ffi::{c_char, c_int, c_void};
use core::mem::size_of;
use core::ptr::null_mut;

use parking_lot::RwLock;
use verbs_abi::provider::{ObjectKind, ProviderDevice, ProviderOps, VerbsObject};
use verbs_abi::*;

use crate::driver::{providers, Provider};
use crate::util::{errno_result, ptr_ret, set_errno, warning};
use verbs_rt::export;

/// Our device object. `ibv` must stay first: `ibv_device *` and
/// `Device *` are the same address.
#[repr(C)]
pub(crate) struct Device {
    pub ibv: ibv_device,
    pub ops: &'static ProviderOps,
    /// The provider's reference, handed back to `open_device`.
    pub handle: *mut c_void,
    /// Node GUID, network byte order.
    pub guid: u64,
    /// Position in creation order; stable for the life of the process.
    pub index: c_int,
    /// The name as the provider reported it, for matching on rediscovery
    /// (the `ibv` copy is writable by callers and providers).
    key: [c_char; IBV_SYSFS_NAME_MAX],
    /// A kernel device: the rdma-core provider's own `ibv_device`, which is
    /// what the list hands out (its provider reaches its private device
    /// from it); `ibv` is then unused. NULL for our providers' devices.
    ext: *mut ibv_device,
    /// A kernel device's identity across rediscovery.
    kkey: Option<(String, i32)>,
}

impl Device {
    /// The `ibv_device *` programs see.
    fn ptr(&self) -> *mut ibv_device {
        if self.ext.is_null() {
            &self.ibv as *const ibv_device as *mut ibv_device
        } else {
            self.ext
        }
    }
}

/// What the verbs need from a device, copied out of the registry.
#[derive(Clone, Copy)]
pub(crate) struct DeviceRef {
    pub ops: &'static ProviderOps,
    pub handle: *mut c_void,
    pub guid: u64,
    pub index: c_int,
}

struct DevPtr(*mut Device);
// SAFETY: a Device is created once, never freed, and after creation only its
// `ibv` part is ever written (by its users, through the C pointer); the
// registry itself only compares addresses and reads the immutable fields.
unsafe impl Send for DevPtr {}
// SAFETY: as above.
unsafe impl Sync for DevPtr {}

/// Every device ever created, in creation order.
static DEVICES: RwLock<Vec<DevPtr>> = RwLock::new(Vec::new());

/// Finds our device behind an `ibv_device *`; None for NULL or a pointer we
/// never handed out.
pub(crate) fn lookup(dev: *const ibv_device) -> Option<DeviceRef> {
    if dev.is_null() {
        return None;
    }
    let list = DEVICES.read();
    // SAFETY: registered devices are live forever.
    let d = list
        .iter()
        .find(|d| core::ptr::eq(unsafe { (*d.0).ptr() }, dev))?;
    // SAFETY: registered devices are live forever; these fields are never
    // written after creation.
    unsafe {
        Some(DeviceRef {
            ops: (*d.0).ops,
            handle: (*d.0).handle,
            guid: (*d.0).guid,
            index: (*d.0).index,
        })
    }
}

/// Every context `ibv_open_device` has returned and `ibv_close_device` has
/// not yet closed, with its provider. Verbs look contexts up here instead of
/// reading through the pointer, so a NULL, foreign or already closed
/// context is EINVAL rather than a read of freed memory (a double
/// `ibv_close_device` would otherwise free the provider's context twice).
/// Not a fork-fresh `verbs_rt::Handles`: a forked child keeps its parent's
/// contexts usable for queries, as with rdma-core (librdmacm's device list,
/// made before a fork, opens ids in the child through them).
static CONTEXTS: RwLock<Vec<(usize, &'static ProviderOps)>> = RwLock::new(Vec::new());

/// Records a context the provider has just opened (never NULL).
pub(crate) fn register_context(ctx: *mut ibv_context, ops: &'static ProviderOps) {
    CONTEXTS.write().push((ctx as usize, ops));
}

/// Takes a context out of the open set; None if it is not open. Taking it
/// out before the provider closes it means two racing closes cannot both
/// reach the provider.
pub(crate) fn unregister_context(ctx: *mut ibv_context) -> Option<&'static ProviderOps> {
    let mut list = CONTEXTS.write();
    let i = list.iter().position(|&(c, _)| c == ctx as usize)?;
    Some(list.swap_remove(i).1)
}

/// The provider behind an open context, or EINVAL for NULL, foreign and
/// closed contexts. The pointer itself is never dereferenced.
pub(crate) fn context_ops(ctx: *mut ibv_context) -> Result<&'static ProviderOps, c_int> {
    CONTEXTS
        .read()
        .iter()
        .find(|&&(c, _)| c == ctx as usize)
        .map(|&(_, ops)| ops)
        .ok_or(libc::EINVAL)
}

/// The context an object belongs to, validated before anything is read
/// through the pointer: the providers of the open contexts are asked
/// whether `obj` is a live object of theirs (`object_context`), so a stale
/// pointer (destroyed, deregistered) or a foreign one gets EINVAL, never a
/// read of freed memory. Only when a provider cannot answer is the
/// pointer trusted, as rdma-core does: every verbs object (PD, MR, CQ, QP,
/// SRQ, AH, WQ, MW, completion channel) starts with its `ibv_context *`.
///
/// # Safety
/// `obj` is NULL or was a `T` (it may have been destroyed since).
pub(crate) unsafe fn object_context<T: VerbsObject>(
    obj: *mut T,
) -> Result<*mut ibv_context, c_int> {
    // SAFETY: forwarded contract.
    unsafe { object_context_of(obj.cast(), T::KIND) }
}

/// [`object_context`] for an untyped pointer of a known kind.
///
/// # Safety
/// As for [`object_context`].
pub(crate) unsafe fn object_context_of(
    obj: *mut c_void,
    kind: ObjectKind,
) -> Result<*mut ibv_context, c_int> {
    if obj.is_null() {
        return Err(libc::EINVAL);
    }
    let mut unchecked = false;
    let mut asked: Vec<usize> = Vec::new();
    let providers: Vec<&'static ProviderOps> = CONTEXTS.read().iter().map(|&(_, o)| o).collect();
    for ops in providers {
        let key = ops as *const ProviderOps as usize;
        if asked.contains(&key) {
            continue;
        }
        asked.push(key);
        match ops.object_context {
            Some(f) => {
                // SAFETY: the provider looks the pointer up without reading
                // through it.
                let ctx = unsafe { f(kind as u32, obj) };
                if !ctx.is_null() {
                    return Ok(ctx);
                }
            }
            None => unchecked = true,
        }
    }
    if !unchecked {
        return Err(libc::EINVAL);
    }
    // SAFETY: a provider that cannot validate owns it, by the caller's
    // contract; the first field of every verbs object is its context.
    let ctx = unsafe { *(obj as *const *mut ibv_context) };
    if ctx.is_null() {
        Err(libc::EINVAL)
    } else {
        Ok(ctx)
    }
}

/// `object_context` followed by `context_ops`.
///
/// # Safety
/// As for [`object_context`].
pub(crate) unsafe fn object_ops<T: VerbsObject>(
    obj: *mut T,
) -> Result<(&'static ProviderOps, *mut ibv_context), c_int> {
    // SAFETY: forwarded contract.
    let ctx = unsafe { object_context(obj) }?;
    Ok((context_ops(ctx)?, ctx))
}

/// The body of every destroy/dealloc verb: the provider's `entry` releases
/// `obj`, whose context must still be open.
///
/// # Safety
/// As for [`object_context`].
pub(crate) unsafe fn release<T: VerbsObject, F>(obj: *mut T, entry: F) -> c_int
where
    F: Fn(&ProviderOps) -> Option<unsafe extern "C" fn(*mut T) -> c_int>,
{
    // The closure is what lets `?` return early.
    #[allow(clippy::redundant_closure_call)]
    let r = (|| {
        // SAFETY: forwarded contract.
        let (ops, _) = unsafe { object_ops(obj) }?;
        let f = entry(ops).ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own object.
        errno_result(unsafe { f(obj) })
    })();
    if verbs_rt::trace::on() {
        // F is the caller's closure: its type names the exported call
        // (`ibverbs::mr::ibv_dereg_mr::{{closure}}`).
        verbs_rt::trace::verb(
            core::any::type_name::<F>(),
            "int",
            &[("handle", verbs_rt::trace::Val::from(obj))],
            &r,
        );
    }
    verbs_rt::errno::int_or_errno(r)
}

/// Copies `src` into a fixed C string field, truncating and terminating.
fn set_c_str(dst: &mut [c_char], src: &str) {
    let n = src.len().min(dst.len() - 1);
    for (d, s) in dst.iter_mut().zip(src.as_bytes()[..n].iter()) {
        *d = *s as c_char;
    }
    dst[n..].fill(0);
}

fn c_str_of(field: &[c_char]) -> String {
    let bytes: Vec<u8> = field
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Builds the `ibv_device` part of a new device.
pub(crate) fn make_ibv_device(pd: &ProviderDevice, index: c_int, sysfs_root: &str) -> ibv_device {
    let mut dev = ibv_device::zeroed();
    dev.node_type = pd.node_type;
    dev.transport_type = pd.transport_type;
    let name = c_str_of(&pd.name);
    set_c_str(&mut dev.name, &name);
    // Shaped like a kernel device's, so tools that print them look normal;
    // nothing exists at these paths except under rsw-run (tools/rsw-run),
    // whose tree uses the same names.
    set_c_str(&mut dev.dev_name, &format!("uverbs{index}"));
    set_c_str(
        &mut dev.dev_path,
        &format!("{sysfs_root}/class/infiniband_verbs/uverbs{index}"),
    );
    set_c_str(
        &mut dev.ibdev_path,
        &format!("{sysfs_root}/class/infiniband/{name}"),
    );
    dev
}

/// More devices than one provider can sensibly report.
const MAX_DEVICES_PER_PROVIDER: usize = 4096;

/// Asks one provider for its devices, growing the buffer if it has more.
fn discover(p: &Provider) -> Vec<ProviderDevice> {
    let Some(discover) = p.ops.discover else {
        return Vec::new();
    };
    let mut cap = 16usize;
    for _ in 0..4 {
        // SAFETY: ProviderDevice is integers, a char array and a pointer, for
        // all of which zero is valid.
        let mut buf = vec![unsafe { core::mem::zeroed::<ProviderDevice>() }; cap];
        // SAFETY: buf has room for `cap` entries, as the contract requires.
        let n = unsafe { discover(buf.as_mut_ptr(), cap) };
        if n < 0 {
            warning!(
                "provider '{}' failed to list devices (errno {})",
                p.name,
                -n
            );
            return Vec::new();
        }
        let n = n as usize;
        if n <= cap {
            buf.truncate(n);
            return buf;
        }
        // A count no host has is a provider bug; growing the buffer to it
        // would end in an allocation failure, which aborts the program.
        if n > MAX_DEVICES_PER_PROVIDER {
            warning!("provider '{}' reports {n} devices; ignored", p.name);
            return Vec::new();
        }
        cap = n;
    }
    warning!(
        "provider '{}' keeps changing its device count; ignored",
        p.name
    );
    Vec::new()
}

/// Runs discovery and returns the devices present now, creating objects
/// for new ones.
fn refresh() -> Vec<*mut ibv_device> {
    let provs = providers();
    // SAFETY: ibv_get_sysfs_path returns a static C string.
    let root = unsafe { core::ffi::CStr::from_ptr(crate::sysfs::ibv_get_sysfs_path()) }
        .to_string_lossy()
        .into_owned();
    // Held across discovery so concurrent callers agree on the objects.
    let mut all = DEVICES.write();
    let mut now = Vec::new();
    // Kernel devices first, in the kernel's order, as rdma-core lists them.
    let known = |k: &(String, i32)| {
        all.iter()
            // SAFETY: registered devices are live; `kkey` is immutable.
            .any(|d| unsafe { (*d.0).kkey.as_ref() } == Some(k))
    };
    let found = crate::kernel::discover(&known);
    for f in found {
        let dev = match f {
            Err(key) => all
                .iter()
                // SAFETY: as above.
                .find(|d| unsafe { (*d.0).kkey.as_ref() } == Some(&key))
                .map(|d| d.0),
            Ok(k) => {
                let index = c_int::try_from(all.len()).unwrap_or(c_int::MAX);
                let d = Box::into_raw(Box::new(Device {
                    ibv: ibv_device::zeroed(),
                    ops: &crate::kernel::ops::KERNEL_OPS,
                    handle: k.vdev.cast(),
                    guid: k.guid,
                    index,
                    key: [0; IBV_SYSFS_NAME_MAX],
                    ext: k.vdev.cast(),
                    kkey: Some(k.key),
                }));
                all.push(DevPtr(d));
                Some(d)
            }
        };
        if let Some(d) = dev {
            // SAFETY: a registered device.
            let ibv = unsafe { (*d).ptr() };
            if !now.contains(&ibv) {
                now.push(ibv);
            }
        }
    }
    for p in provs {
        for mut pd in discover(p) {
            pd.name[IBV_SYSFS_NAME_MAX - 1] = 0;
            if pd.name[0] == 0 {
                warning!(
                    "provider '{}' reported a device without a name; ignored",
                    p.name
                );
                continue;
            }
            // SAFETY: registered devices are live; `ops` and `key` are
            // never written after creation.
            let existing = all.iter().find(|d| unsafe {
                (*d.0).ext.is_null() && core::ptr::eq((*d.0).ops, p.ops) && (*d.0).key == pd.name
            });
            let dev = match existing {
                Some(d) => d.0,
                None => {
                    let index = c_int::try_from(all.len()).unwrap_or(c_int::MAX);
                    let d = Box::into_raw(Box::new(Device {
                        ibv: make_ibv_device(&pd, index, &root),
                        ops: p.ops,
                        handle: pd.handle,
                        guid: pd.node_guid,
                        index,
                        key: pd.name,
                        ext: null_mut(),
                        kkey: None,
                    }));
                    all.push(DevPtr(d));
                    d
                }
            };
            let ibv = dev as *mut ibv_device;
            if !now.contains(&ibv) {
                now.push(ibv);
            }
        }
    }
    now
}

/// # Safety
/// `num_devices` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    export!(raw::ptr, (num_devices), {
        if !num_devices.is_null() {
            // SAFETY: checked non-NULL; the caller provides an int.
            unsafe { *num_devices = 0 };
        }
        let devs = refresh();
        // SAFETY: plain allocation; released by ibv_free_device_list with free().
        let list = unsafe { libc::calloc(devs.len() + 1, size_of::<*mut ibv_device>()) }
            as *mut *mut ibv_device;
        if list.is_null() {
            set_errno(libc::ENOMEM);
            return null_mut();
        }
        // SAFETY: the array has devs.len() + 1 slots; calloc zeroed the last.
        unsafe { core::ptr::copy_nonoverlapping(devs.as_ptr(), list, devs.len()) };
        if !num_devices.is_null() {
            // SAFETY: as above.
            unsafe { *num_devices = c_int::try_from(devs.len()).unwrap_or(c_int::MAX) };
        }
        list
    })
}

/// # Safety
/// `list` is NULL or came from `ibv_get_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    export!(raw::void, (list), {
        // The devices themselves live on; only the array is ours to free.
        // SAFETY: the array was allocated with calloc; free(NULL) is a no-op.
        unsafe { libc::free(list.cast()) };
    })
}

/// The device's own `name` field, as rdma-core returns it: also for an
/// `ibv_device` the program built itself (a mock device list in a test).
///
/// # Safety
/// `device` is NULL or points to an `ibv_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    export!(raw::ptr, (device), {
        // rdma-core would crash on NULL; refusing costs nothing.
        if device.is_null() {
            set_errno(libc::EINVAL);
            return core::ptr::null();
        }
        // SAFETY: the caller's device (non-NULL); only its address is
        // computed, nothing is read.
        unsafe { (&raw const (*device).name).cast() }
    })
}

/// Our record's GUID for a listed device. For an `ibv_device` the
/// program built itself, rdma-core reads `node_guid` through the sysfs
/// record of the `verbs_device` around it, and answers 0 with EINVAL when
/// there is none; we read the `node_guid` file under the device's own
/// `ibdev_path` (what that record names), and answer 0 with EINVAL when
/// there is no such file.
///
/// # Safety
/// `device` is NULL or points to an `ibv_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> __be64 {
    export!(raw::value, (device), {
        if let Some(d) = lookup(device) {
            return d.guid;
        }
        // SAFETY: NULL or the caller's device.
        match unsafe { foreign_guid(device) } {
            Some(g) => g.to_be(),
            None => {
                set_errno(libc::EINVAL);
                0
            }
        }
    })
}

/// The GUID in `<ibdev_path>/node_guid` of a device that is not ours.
///
/// # Safety
/// `device` is NULL or points to an `ibv_device`.
unsafe fn foreign_guid(device: *const ibv_device) -> Option<u64> {
    if device.is_null() {
        return None;
    }
    // SAFETY: the caller's device (non-NULL): a fixed-size array in it.
    let path = c_str_of(unsafe { &(*device).ibdev_path });
    if path.is_empty() {
        return None;
    }
    parse_guid(&std::fs::read_to_string(format!("{path}/node_guid")).ok()?)
}

/// A `node_guid` file's `xxxx:xxxx:xxxx:xxxx`, host order.
fn parse_guid(s: &str) -> Option<u64> {
    let mut parts = 0;
    let mut g = 0u64;
    for p in s.trim().split(':') {
        g = g << 16 | u64::from(u16::from_str_radix(p, 16).ok()?);
        parts += 1;
    }
    (parts == 4).then_some(g)
}

/// Our record's index for a listed device; -1 for any other, as
/// rdma-core answers for a device without a sysfs record (one the program
/// built itself).
///
/// # Safety
/// `device` is NULL or points to an `ibv_device`; it is not read.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    export!(raw::value, (device), {
        lookup(device).map_or(-1, |d| d.index)
    })
}

/// Importing needs the uverbs command fd of a kernel device; ours have none,
/// so a character device can never match one of them.
///
/// # Safety
/// None: only fstat is applied to `cmd_fd`.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    export!(raw::ptr, (cmd_fd), {
        // SAFETY: fstat on any integer is safe; st is plain data.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: st is a valid out buffer.
        let ok = unsafe { libc::fstat(cmd_fd, &mut st) } == 0;
        let err = if !ok || st.st_mode & libc::S_IFMT != libc::S_IFCHR {
            libc::EINVAL
        } else if kernel_device_of_cdev(st.st_rdev) {
            // A kernel device's command file. Only mlx5 can import a
            // context, and an imported context must create its objects
            // through the ioctl methods, which this library's command
            // path does not do yet.
            libc::EOPNOTSUPP
        } else {
            libc::ENODEV
        };
        ptr_ret(Err(err))
    })
}

/// Whether a listed kernel device has the uverbs character device `rdev`.
fn kernel_device_of_cdev(rdev: libc::dev_t) -> bool {
    // Discovery first, as rdma-core's import does (ibv_get_device_list).
    let _ = refresh();
    DEVICES.read().iter().any(|d| {
        // SAFETY: registered devices are live; a kernel device's `ext` is
        // the provider's verbs_device with our sysfs record.
        unsafe {
            let v = (*d.0).ext.cast::<verbs_abi::driver::verbs_device>();
            !v.is_null() && !(*v).sysfs.is_null() && (*(*v).sysfs).sysfs_cdev == rdev
        }
    })
}

/// Registers a device of a test provider, as discovery would.
#[cfg(test)]
pub(crate) fn add_test_device(ops: &'static ProviderOps) -> *mut ibv_device {
    // SAFETY: all-zero is a valid ProviderDevice.
    let mut pd: ProviderDevice = unsafe { core::mem::zeroed() };
    set_c_str(&mut pd.name, "test0");
    let mut all = DEVICES.write();
    let index = c_int::try_from(all.len()).unwrap_or(c_int::MAX);
    let d = Box::into_raw(Box::new(Device {
        ibv: make_ibv_device(&pd, index, "/sys"),
        ops,
        handle: null_mut(),
        guid: 0,
        index,
        key: pd.name,
        ext: null_mut(),
        kkey: None,
    }));
    all.push(DevPtr(d));
    d.cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_fields() {
        // SAFETY: all-zero ProviderDevice is valid.
        let mut pd: ProviderDevice = unsafe { core::mem::zeroed() };
        set_c_str(&mut pd.name, "rsw0");
        pd.node_type = IBV_NODE_CA;
        pd.transport_type = IBV_TRANSPORT_IB;
        let d = make_ibv_device(&pd, 3, "/sys");
        assert_eq!(c_str_of(&d.name), "rsw0");
        assert_eq!(c_str_of(&d.dev_name), "uverbs3");
        assert_eq!(c_str_of(&d.dev_path), "/sys/class/infiniband_verbs/uverbs3");
        assert_eq!(c_str_of(&d.ibdev_path), "/sys/class/infiniband/rsw0");
        assert_eq!(d.node_type, IBV_NODE_CA);
    }

    #[test]
    fn c_string_truncation() {
        let mut f = [1 as c_char; 4];
        set_c_str(&mut f, "abcdef");
        assert_eq!(f, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
        set_c_str(&mut f, "");
        assert_eq!(f, [0; 4]);
    }

    #[test]
    fn foreign_pointers_are_rejected() {
        let fake = ibv_device::zeroed();
        assert!(lookup(&fake).is_none());
        assert!(lookup(core::ptr::null()).is_none());
        // SAFETY: NULL and unknown devices are refused without being
        // dereferenced.
        unsafe {
            assert_eq!(ibv_get_device_index(core::ptr::null_mut()), -1);
            assert_eq!(ibv_get_device_guid(core::ptr::null_mut()), 0);
            assert!(ibv_get_device_name(core::ptr::null_mut()).is_null());
            ibv_free_device_list(null_mut());
        }
    }

    /// A device the program built itself (a mock device list in a test):
    /// rdma-core reads its name from it, has no index for it, and reads
    /// its GUID from sysfs.
    #[test]
    fn devices_the_program_built() {
        let dir = std::env::temp_dir().join(format!("ibv-mock-dev-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("node_guid"), "0002:c903:0031:7c41\n").unwrap();
        let mut mock = ibv_device::zeroed();
        set_c_str(&mut mock.name, "mock0");
        set_c_str(&mut mock.ibdev_path, dir.to_str().unwrap());
        // SAFETY: a live, initialised ibv_device.
        unsafe {
            let name = ibv_get_device_name(&mut mock);
            assert_eq!(name, mock.name.as_ptr());
            assert_eq!(core::ffi::CStr::from_ptr(name).to_str(), Ok("mock0"));
            assert_eq!(ibv_get_device_index(&mut mock), -1);
            assert_eq!(
                u64::from_be(ibv_get_device_guid(&mut mock)),
                0x0002_c903_0031_7c41
            );
            std::fs::remove_file(dir.join("node_guid")).unwrap();
            set_errno(0);
            assert_eq!(ibv_get_device_guid(&mut mock), 0);
            assert_eq!(*libc::__errno_location(), libc::EINVAL);
            let mut bare = ibv_device::zeroed();
            assert_eq!(ibv_get_device_guid(&mut bare), 0);
            assert_eq!(ibv_get_device_index(&mut bare), -1);
            assert_eq!(*ibv_get_device_name(&mut bare), 0);
        }
        std::fs::remove_dir(&dir).unwrap();
        assert_eq!(
            parse_guid("0002:c903:0031:7c41"),
            Some(0x0002_c903_0031_7c41)
        );
        assert_eq!(parse_guid("0002:c903:0031"), None);
        assert_eq!(parse_guid("zz02:c903:0031:7c41"), None);
    }
}
