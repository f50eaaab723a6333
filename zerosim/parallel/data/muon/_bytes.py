def extra_bytes_sent(*a): raise NotImplementedError
def extra_bytes_held(*a): raise NotImplementedError
