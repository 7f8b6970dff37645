--- The nginx transport under its public name (docs/openresty.md:
-- require("redlock.cosocket").renew): redlock.nginx.cosocket.
return require "redlock.nginx.cosocket"
