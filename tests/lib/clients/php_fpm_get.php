<?php
// php_fpm_get.php -- run by php-fpm: one curl_exec to the URL in the query (?u=...); answers 200
// with "ok" when the upstream answered 200, else 502 with curl's error.
$h = curl_init($_GET["u"]);
curl_setopt($h, CURLOPT_RETURNTRANSFER, true);
curl_setopt($h, CURLOPT_TIMEOUT, 50);
curl_setopt($h, CURLOPT_FORBID_REUSE, true);
curl_exec($h);
$c = curl_getinfo($h, CURLINFO_HTTP_CODE);
http_response_code($c == 200 ? 200 : 502);
echo $c == 200 ? "ok\n" : "failed " . curl_errno($h) . " " . curl_error($h) . "\n";
