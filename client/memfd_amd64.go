package client

// sysMemfdCreate is memfd_create(2)'s number; the syscall package lacks it.
const sysMemfdCreate = 319
