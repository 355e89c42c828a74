//! ESP flow actions (rdma-core's cmd_flow_action.c): create, modify,
//! destroy. Only the ioctl interface has them; the provider's driver
//! attributes come linked (`driver`).

use core::ffi::{c_int, c_void};
use core::mem::size_of;

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd_buffer::CmdBuf;
use super::cmd_issue::{destroy_err, Issue, Kernel};
use verbs_rt::export;

/// Handle, ESN, keymat, replay, encap, ESP attributes.
const ESP_ATTRS_NUM: u32 = 6;

/// `scrub_ptr_attr`: a `RDMA_UAPI_PTR` field holds a pointer in the first
/// bytes of a u64; where pointers are narrower, the rest is made the
/// zero extension the kernel expects.
///
/// # Safety
/// `field` is a writable `RDMA_UAPI_PTR` member.
unsafe fn scrub_ptr(field: *mut u64) {
    if size_of::<usize>() != size_of::<u64>() {
        // SAFETY: per the contract; the pointer sits at the field's start.
        unsafe {
            let p = field.cast::<usize>().read_unaligned();
            field.write_unaligned(p as u64);
        }
    }
}

/// `copy_flow_action_esp`: the optional attributes `attr` carries.
///
/// # Safety
/// `esp` and the buffers it points at are live until the call is issued.
unsafe fn copy_esp(esp: &ibv_flow_action_esp_attr, cb: &mut CmdBuf) {
    // SAFETY: per the contract.
    unsafe {
        if esp.comp_mask & IBV_FLOW_ACTION_ESP_MASK_ESN != 0 {
            cb.in_ptr(
                UVERBS_ATTR_FLOW_ACTION_ESP_ESN,
                (&esp.esn as *const u32).cast(),
                size_of::<u32>(),
            );
        }
        if !esp.keymat_ptr.is_null() {
            cb.in_enum(
                UVERBS_ATTR_FLOW_ACTION_ESP_KEYMAT,
                esp.keymat_proto as u8,
                esp.keymat_ptr,
                esp.keymat_len as usize,
            );
        }
        if !esp.replay_ptr.is_null() {
            cb.in_enum(
                UVERBS_ATTR_FLOW_ACTION_ESP_REPLAY,
                esp.replay_proto as u8,
                esp.replay_ptr,
                esp.replay_len as usize,
            );
        }
        if !esp.esp_encap.is_null() {
            let e = esp.esp_encap.cast::<ib_uverbs_flow_action_esp_encap>();
            scrub_ptr(core::ptr::addr_of_mut!((*e).val_ptr));
            scrub_ptr(core::ptr::addr_of_mut!((*e).next_ptr));
            cb.in_ptr(
                UVERBS_ATTR_FLOW_ACTION_ESP_ENCAP,
                e as *const c_void,
                size_of::<ib_uverbs_flow_action_esp_encap>(),
            );
        }
        if !esp.esp_attr.is_null() {
            cb.in_ptr(
                UVERBS_ATTR_FLOW_ACTION_ESP_ATTRS,
                esp.esp_attr,
                size_of::<ib_uverbs_flow_action_esp>(),
            );
        }
    }
}

/// # Safety
/// `ctx` a kernel context; `attr` readable with the buffers it names;
/// `flow_action` the provider's new action; `driver` NULL or its command
/// buffers.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_flow_action_esp(
    ctx: *mut ibv_context,
    attr: *mut ibv_flow_action_esp_attr,
    flow_action: *mut verbs_flow_action,
    driver: *mut ibv_command_buffer,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { create_flow_action_esp(ctx, attr, flow_action, driver, &mut Kernel) }
    })
}

pub(crate) unsafe fn create_flow_action_esp(
    ctx: *mut ibv_context,
    attr: *mut ibv_flow_action_esp_attr,
    flow_action: *mut verbs_flow_action,
    driver: *mut ibv_command_buffer,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_create_flow_action_esp`.
    unsafe {
        let mut cb = CmdBuf::new(
            UVERBS_OBJECT_FLOW_ACTION,
            UVERBS_METHOD_FLOW_ACTION_ESP_CREATE,
            ESP_ATTRS_NUM,
            driver,
        );
        let handle = cb.out_obj(UVERBS_ATTR_CREATE_FLOW_ACTION_ESP_HANDLE);
        copy_esp(&*attr, &mut cb);
        let rc = k.ioctl(ctx, &mut cb);
        if rc != 0 {
            return rc;
        }
        (*flow_action).action.context = ctx;
        (*flow_action).r#type = IBV_FLOW_ACTION_ESP;
        (*flow_action).handle = cb.read_obj(handle);
    }
    0
}

/// # Safety
/// `flow_action` a live action of a kernel context; `attr` as for create;
/// `driver` NULL or the provider's command buffers.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_modify_flow_action_esp(
    flow_action: *mut verbs_flow_action,
    attr: *mut ibv_flow_action_esp_attr,
    driver: *mut ibv_command_buffer,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { modify_flow_action_esp(flow_action, attr, driver, &mut Kernel) }
    })
}

pub(crate) unsafe fn modify_flow_action_esp(
    flow_action: *mut verbs_flow_action,
    attr: *mut ibv_flow_action_esp_attr,
    driver: *mut ibv_command_buffer,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_modify_flow_action_esp`.
    unsafe {
        let mut cb = CmdBuf::new(
            UVERBS_OBJECT_FLOW_ACTION,
            UVERBS_METHOD_FLOW_ACTION_ESP_MODIFY,
            ESP_ATTRS_NUM,
            driver,
        );
        cb.in_obj(
            UVERBS_ATTR_MODIFY_FLOW_ACTION_ESP_HANDLE,
            (*flow_action).handle,
        );
        copy_esp(&*attr, &mut cb);
        k.ioctl((*flow_action).action.context, &mut cb)
    }
}

/// # Safety
/// `action` is a live flow action of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_flow_action(action: *mut verbs_flow_action) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { destroy_flow_action(action, &mut Kernel) }
    })
}

pub(crate) unsafe fn destroy_flow_action(
    action: *mut verbs_flow_action,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_destroy_flow_action`.
    let mut rc = unsafe {
        let mut cb = CmdBuf::new(
            UVERBS_OBJECT_FLOW_ACTION,
            UVERBS_METHOD_FLOW_ACTION_DESTROY,
            1,
            core::ptr::null_mut(),
        );
        cb.in_obj(UVERBS_ATTR_DESTROY_FLOW_ACTION_HANDLE, (*action).handle);
        k.ioctl((*action).action.context, &mut cb)
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cmd_buffer::key;
    use crate::kernel::cmd_issue::testing::{FakeCtx, IoctlFake};
    use crate::kernel::ioctl::UVERBS_ATTR_F_MANDATORY as M;

    fn esp_attr() -> ibv_flow_action_esp_attr {
        ibv_flow_action_esp_attr::zeroed()
    }

    #[test]
    fn create_with_every_optional_attribute() {
        let f = FakeCtx::new();
        let mut keymat = ib_uverbs_flow_action_esp_keymat_aes_gcm {
            key_len: 32,
            ..Default::default()
        };
        let mut replay = ib_uverbs_flow_action_esp_replay_bmp { size: 64 };
        let mut encap = ib_uverbs_flow_action_esp_encap {
            val_ptr: 0x1000,
            len: 4,
            ..Default::default()
        };
        let mut esp = ib_uverbs_flow_action_esp {
            spi: 0x100,
            ..Default::default()
        };
        let mut a = esp_attr();
        a.esp_attr = (&mut esp as *mut ib_uverbs_flow_action_esp).cast();
        a.keymat_proto = IBV_FLOW_ACTION_ESP_KEYMAT_AES_GCM;
        a.keymat_len = size_of::<ib_uverbs_flow_action_esp_keymat_aes_gcm>() as u16;
        a.keymat_ptr = (&mut keymat as *mut ib_uverbs_flow_action_esp_keymat_aes_gcm).cast();
        a.replay_proto = IBV_FLOW_ACTION_ESP_REPLAY_BMP;
        a.replay_len = 4;
        a.replay_ptr = (&mut replay as *mut ib_uverbs_flow_action_esp_replay_bmp).cast();
        a.esp_encap = (&mut encap as *mut ib_uverbs_flow_action_esp_encap).cast();
        a.comp_mask = IBV_FLOW_ACTION_ESP_MASK_ESN;
        a.esn = 0x0102_0304;
        // SAFETY: every object outlives the calls.
        unsafe {
            let mut link = CmdBuf::new(
                UVERBS_OBJECT_FLOW_ACTION,
                UVERBS_METHOD_FLOW_ACTION_ESP_CREATE,
                1,
                core::ptr::null_mut(),
            );
            link.in_u32(0x1000, 1);
            let lp = link.cmdb();
            let mut fa = verbs_flow_action::zeroed();
            let rc = create_flow_action_esp(
                f.ctx(),
                &mut a,
                &mut fa,
                lp,
                &mut IoctlFake(|_, cb: &mut CmdBuf| {
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (
                            UVERBS_OBJECT_FLOW_ACTION,
                            UVERBS_METHOD_FLOW_ACTION_ESP_CREATE
                        )
                    );
                    assert_eq!((*cb.cmdb()).next, lp);
                    let v = cb.filled();
                    assert_eq!(v.len(), 6);
                    assert_eq!(
                        key(&v[0]),
                        (UVERBS_ATTR_CREATE_FLOW_ACTION_ESP_HANDLE, 0, M, 0, 0)
                    );
                    // Four bytes: inline.
                    assert_eq!(
                        (v[1].attr_id, v[1].len),
                        (UVERBS_ATTR_FLOW_ACTION_ESP_ESN, 4)
                    );
                    assert_eq!(v[1].data.to_ne_bytes()[..4], 0x0102_0304u32.to_ne_bytes());
                    let km = key(&v[2]);
                    assert_eq!(
                        (km.0, km.1, km.4),
                        (UVERBS_ATTR_FLOW_ACTION_ESP_KEYMAT, 56, a.keymat_ptr as u64)
                    );
                    assert_eq!(v[2].attr_data.enum_data.elem_id, 0);
                    assert_eq!(
                        (v[3].attr_id, v[3].len),
                        (UVERBS_ATTR_FLOW_ACTION_ESP_REPLAY, 4)
                    );
                    assert_eq!(
                        v[3].attr_data.enum_data.elem_id,
                        IBV_FLOW_ACTION_ESP_REPLAY_BMP as u8
                    );
                    assert_eq!(v[3].data as u32, 64);
                    assert_eq!(
                        key(&v[4]),
                        (
                            UVERBS_ATTR_FLOW_ACTION_ESP_ENCAP,
                            24,
                            M,
                            0,
                            a.esp_encap as u64
                        )
                    );
                    assert_eq!(
                        key(&v[5]),
                        (
                            UVERBS_ATTR_FLOW_ACTION_ESP_ATTRS,
                            24,
                            M,
                            0,
                            a.esp_attr as u64
                        )
                    );
                    cb.set_data(0, 0x33);
                    0
                }),
            );
            assert_eq!(rc, 0);
            assert_eq!(
                (fa.handle, fa.r#type, fa.action.context),
                (0x33, IBV_FLOW_ACTION_ESP, f.ctx())
            );
            // The encap's pointers are already 64-bit here: left alone.
            assert_eq!(encap.val_ptr, 0x1000);
            assert_eq!(
                ibv_cmd_create_flow_action_esp(f.ctx(), &mut a, &mut fa, lp),
                libc::ENOTTY
            );
        }
    }

    #[test]
    fn modify_and_destroy() {
        let f = FakeCtx::new();
        let mut a = esp_attr();
        let mut esp = ib_uverbs_flow_action_esp::default();
        a.esp_attr = (&mut esp as *mut ib_uverbs_flow_action_esp).cast();
        // SAFETY: every object outlives the calls.
        unsafe {
            let mut fa = verbs_flow_action::zeroed();
            fa.handle = 12;
            fa.action.context = f.ctx();
            let rc = modify_flow_action_esp(
                &mut fa,
                &mut a,
                core::ptr::null_mut(),
                &mut IoctlFake(|ctx, cb: &mut CmdBuf| {
                    assert_eq!(ctx, f.ctx());
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (
                            UVERBS_OBJECT_FLOW_ACTION,
                            UVERBS_METHOD_FLOW_ACTION_ESP_MODIFY
                        )
                    );
                    let v = cb.filled();
                    // Only what is set: the handle and the ESP attributes.
                    assert_eq!(v.len(), 2);
                    assert_eq!(
                        key(&v[0]),
                        (UVERBS_ATTR_MODIFY_FLOW_ACTION_ESP_HANDLE, 0, M, 0, 12)
                    );
                    assert_eq!(v[1].attr_id, UVERBS_ATTR_FLOW_ACTION_ESP_ATTRS);
                    libc::EINVAL
                }),
            );
            assert_eq!(rc, libc::EINVAL);
            let rc = destroy_flow_action(
                &mut fa,
                &mut IoctlFake(|_, cb: &mut CmdBuf| {
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (UVERBS_OBJECT_FLOW_ACTION, UVERBS_METHOD_FLOW_ACTION_DESTROY)
                    );
                    let v = cb.filled();
                    assert_eq!(v.len(), 1);
                    assert_eq!(
                        key(&v[0]),
                        (UVERBS_ATTR_DESTROY_FLOW_ACTION_HANDLE, 0, M, 0, 12)
                    );
                    0
                }),
            );
            assert_eq!(rc, 0);
            assert_eq!(ibv_cmd_destroy_flow_action(&mut fa), libc::ENOTTY);
            assert_eq!(
                ibv_cmd_modify_flow_action_esp(&mut fa, &mut a, core::ptr::null_mut()),
                libc::ENOTTY
            );
        }
    }
}
