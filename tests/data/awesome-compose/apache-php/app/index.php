<?php 
    echo '<h1>Hello World!</h1>'; 
?> 
